"""pad_crop: a black border of 4-16 px added, or 4-16 px cropped from every side."""

import pytest

pytestmark = pytest.mark.pad_crop


def test_pad_crop(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("pad_crop", dataset, device)
