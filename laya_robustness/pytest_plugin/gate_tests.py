"""The gate's family tests, made from the registry: one test function per declared family (built-in, or declared by
a ``laya_robustness.families`` entry point of an installed package), named ``test_<family>`` and marked with the
family's marker (and ``slow`` where the family says so), so ``-k negation``, ``-m gpu`` and ``--lf`` work on
``test_<family>[<dataset>-<device>]`` as on any written test; and the markers they use."""

from __future__ import annotations

from typing import Callable

import pytest

from laya_robustness.families import Family, declared

#: The attribute of a family test's function that names its family (what ``selection.planned_cells`` reads).
FAMILY_ATTRIBUTE = "gate_family"
#: The markers of the gate's tests besides one per family.
MARKERS = {
    "gpu": "needs a CUDA device; skips with a reason where there is none",
    "invariance": "a repeat / batch invariance condition",
    "slow": "takes minutes rather than seconds",
    "orig": "the unperturbed rows",
    "baseline": "a comparison with the predictions of an earlier run (--baseline)",
}


def markers() -> dict[str, str]:
    """Every marker of the gate's tests with what it means: ``MARKERS``, then one per declared family."""
    out = dict(MARKERS)
    for family in declared():
        if family.name not in MARKERS:
            out[family.name] = f"the {family.name} family ({family.summary})"
    return out


def _family_test(family: Family) -> Callable:
    """The test of one family: question rows are parametrised by ``dataset``, caption rows by ``caption_set``."""
    name = family.name
    if family.source == "captions":
        def test(robustness, caption_set, device):
            robustness.check_family(name, caption_set, device)
    else:
        def test(robustness, dataset, device):
            robustness.check_family(name, dataset, device)
    test.__name__ = test.__qualname__ = f"test_{name}"
    setattr(test, FAMILY_ATTRIBUTE, name)
    test.__doc__ = f"{name}: {family.summary}; its limits in the limits file hold."
    marks = [getattr(pytest.mark, name)] + ([pytest.mark.slow] if family.slow else [])
    for mark in marks:
        test = mark(test)
    return test


def family_tests() -> dict[str, Callable]:
    """``{"test_<family>": test}`` for every declared family, in declaration order (orig first)."""
    return {f"test_{f.name}": _family_test(f) for f in declared()}
