"""lgip_flip: one object, colour or count word changed so the caption contradicts the image."""

import pytest

pytestmark = pytest.mark.lgip_flip


def test_lgip_flip(robustness, caption_set, device):
    """The positive rate of every attribute stays within thresholds.toml."""
    robustness.check_family("lgip_flip", caption_set, device)
