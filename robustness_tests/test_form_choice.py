"""form_choice: the same judgment asked in the other primitive (yes/no as a choice, a choice as k yes/no rows)."""

import pytest

pytestmark = pytest.mark.form_choice


def test_form_choice(robustness, dataset, device):
    """Accuracy in the other form stays within thresholds.toml."""
    robustness.check_family("form_choice", dataset, device)
