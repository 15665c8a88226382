"""text_only: each question asked with no image, its text context kept (a control)."""

import pytest

pytestmark = pytest.mark.text_only


def test_text_only(robustness, dataset, device):
    """Accuracy falls by at least the control gap: the model needs the image."""
    robustness.check_family("text_only", dataset, device)
