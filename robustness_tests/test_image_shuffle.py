"""image_shuffle: each question asked about another image of its dataset (a control)."""

import pytest

pytestmark = pytest.mark.image_shuffle


def test_image_shuffle(robustness, dataset, device):
    """Accuracy falls by at least the control gap: the model reads the image."""
    robustness.check_family("image_shuffle", dataset, device)
