"""abstain: the gold option removed, or "none of the above" offered (with the real or a mismatched image)."""

import pytest

pytestmark = pytest.mark.abstain


def test_abstain(robustness, dataset, device):
    """Accuracy on the rows that have a right answer stays within thresholds.toml."""
    robustness.check_family("abstain", dataset, device)
