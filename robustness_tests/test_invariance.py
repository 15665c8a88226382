"""Repeat and batch invariance: a row's logits must not depend on its batch, its call or the cache."""

import pytest

from laya_robustness.run.pipeline.invariance import CONDITION_NAMES, DUAL_CONDITIONS

pytestmark = pytest.mark.invariance


@pytest.mark.parametrize("condition", CONDITION_NAMES)
def test_invariance(robustness, condition, device):
    """Each condition against its own path's reference: bitwise / |dp| / |dlogit| / flips within limits."""
    robustness.check_invariance(condition, device)


@pytest.mark.parametrize("condition", DUAL_CONDITIONS)
def test_dual_invariance(robustness, condition, device):
    """The dual encoder's similarities under the conditions it can take, on caption rows."""
    robustness.check_invariance(condition, device, source="captions")
