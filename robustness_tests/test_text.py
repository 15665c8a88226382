"""text: the question and options reworded by meaning-preserving rules."""

import pytest

pytestmark = pytest.mark.text


def test_text(robustness, dataset, device):
    """Flip rate and the paired accuracy drop stay within thresholds.toml."""
    robustness.check_family("text", dataset, device)
