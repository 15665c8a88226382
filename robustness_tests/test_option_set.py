"""option_set: a distractor borrowed from another image's row, or a wrong option dropped."""

import pytest

pytestmark = pytest.mark.option_set


def test_option_set(robustness, dataset, device):
    """Accuracy and label-space flips stay within thresholds.toml."""
    robustness.check_family("option_set", dataset, device)
