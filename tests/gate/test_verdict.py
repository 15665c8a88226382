"""The verdict of one cell: every combination of passed / failed checks with and without known limitations."""

import pytest

from laya_robustness.gate.results import CheckResult
from laya_robustness.gate.verdict import FAIL, PASS, XFAIL, XPASS, cell_verdict


def result(check, passed):
    return CheckResult("text", "vsr", check, passed, 0.5, 0.1, None, "detail")


@pytest.mark.parametrize("results, known, outcome", [
    ([], {}, PASS),
    ([result("max_flip", True)], {}, PASS),
    ([result("max_flip", False)], {}, FAIL),
    ([result("max_flip", False)], {"max_flip": "why"}, XFAIL),
    ([result("max_flip", True)], {"max_flip": "why"}, XPASS),
    ([result("max_flip", False), result("max_drop", False)], {"max_flip": "why"}, FAIL),  # one undeclared miss
    ([result("max_flip", False), result("max_drop", True)], {"max_flip": "why", "max_drop": "why"}, XPASS),
    ([result("max_flip", False), result("max_drop", True)], {"max_flip": "why"}, XFAIL),
    ([result("max_flip", True), result("max_drop", False)], {"max_flip": "why"}, FAIL),  # fail beats xpass
])
def test_outcomes(results, known, outcome):
    assert cell_verdict(results, known.get).outcome == outcome


def test_the_verdict_names_what_it_is_about():
    flip, drop, gap = result("max_flip", False), result("max_drop", True), result("min_gap", False)
    v = cell_verdict([flip, drop, gap], {"max_flip": "never learned", "max_drop": "old"}.get)
    assert v.outcome == FAIL and v.failures == (gap,)
    assert v.expected == ((flip, "never learned"),) and v.fixed == (drop,)


def test_an_undecided_check_fails_nothing_and_keeps_a_known_limitation_expected():
    undecided = CheckResult("text", "vsr", "max_flip", True, 0.12, 0.1, None, "detail", judge="interval",
                            decision="undecided")
    assert cell_verdict([undecided], {}.get).outcome == PASS
    v = cell_verdict([undecided], {"max_flip": "never learned"}.get)
    assert v.outcome == XFAIL and v.undecided == (undecided,)
    assert v.expected[0][1].startswith("borderline") and "never learned" in v.expected[0][1]
