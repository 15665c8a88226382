"""inject_text: a wrong answer planted in the question or its context (adversarial)."""

import pytest

pytestmark = pytest.mark.inject_text


def test_inject_text(robustness, dataset, device):
    """The attack success rate and accuracy stay within thresholds.toml."""
    robustness.check_family("inject_text", dataset, device)
