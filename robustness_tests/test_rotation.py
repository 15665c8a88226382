"""rotation: the image turned -30 and +30 degrees, canvas expanded."""

import pytest

pytestmark = pytest.mark.rotation


def test_rotation(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("rotation", dataset, device)
