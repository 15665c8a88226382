"""shift: the image rolled sideways by 4-16 px (cyclic)."""

import pytest

pytestmark = pytest.mark.shift


def test_shift(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("shift", dataset, device)
