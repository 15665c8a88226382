"""rephrase: the question in other words (general rules, and the user's rephrasings)."""

import pytest

pytestmark = pytest.mark.rephrase


def test_rephrase(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("rephrase", dataset, device)
