"""scale: the image downscaled x0.9 (bicubic)."""

import pytest

pytestmark = pytest.mark.scale


def test_scale(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("scale", dataset, device)
