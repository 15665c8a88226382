"""inject_image: the wrong option's text drawn into the image (typographic, adversarial)."""

import pytest

pytestmark = pytest.mark.inject_image


def test_inject_image(robustness, dataset, device):
    """The typographic attack success rate and accuracy stay within thresholds.toml."""
    robustness.check_family("inject_image", dataset, device)
