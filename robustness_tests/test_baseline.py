"""Against a baseline (--baseline, the last release's predictions): no family loses more than max_regression."""

import pytest

from laya_robustness.families import declared

pytestmark = pytest.mark.baseline


@pytest.mark.parametrize("family", [f.name for f in declared()])
def test_no_regression(robustness, family, device):
    """The family's paired accuracy change over all its datasets, judged like every limit."""
    robustness.check_regression(family, device)
