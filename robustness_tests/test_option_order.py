"""option_order: the same options in every cyclic shift, reversed, and one seeded permutation."""

import pytest

pytestmark = pytest.mark.option_order


def test_option_order(robustness, dataset, device):
    """Flip rate and the paired accuracy drop stay within thresholds.toml."""
    robustness.check_family("option_order", dataset, device)
