"""lgip_paraphrase: the caption reworded (wrappers, synonyms, passive voice, reordering, user paraphrases)."""

import pytest

pytestmark = pytest.mark.lgip_paraphrase


def test_lgip_paraphrase(robustness, caption_set, device):
    """The invariance error E_inv stays within thresholds.toml."""
    robustness.check_family("lgip_paraphrase", caption_set, device)
