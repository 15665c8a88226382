"""image: JPEG, crops, rescale and brightness applied to the image."""

import pytest

pytestmark = pytest.mark.image


def test_image(robustness, dataset, device):
    """Flip rate and the paired accuracy drop stay within thresholds.toml."""
    robustness.check_family("image", dataset, device)
