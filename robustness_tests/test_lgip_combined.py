"""lgip_combined: a paraphrase of the caption, and the same rewording of each flip."""

import pytest

pytestmark = pytest.mark.lgip_combined


def test_lgip_combined(robustness, caption_set, device):
    """E_inv and the positive rate of every attribute stay within thresholds.toml."""
    robustness.check_family("lgip_combined", caption_set, device)
