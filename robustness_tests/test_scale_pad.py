"""scale_pad: the image downscaled x0.9 and padded back to its size, black and white."""

import pytest

pytestmark = pytest.mark.scale_pad


def test_scale_pad(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("scale_pad", dataset, device)
