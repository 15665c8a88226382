"""negation: a negated yes/no frame with the label flipped."""

import pytest

pytestmark = pytest.mark.negation


def test_negation(robustness, dataset, device):
    """Accuracy under negation stays within thresholds.toml."""
    robustness.check_family("negation", dataset, device)
