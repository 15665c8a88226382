"""The verdict of one gate cell: pass, fail, xfail (a declared known limitation) or xpass — a pure function.

A cell is one family on one dataset (or one invariance condition). Its checks were evaluated
(``laya_robustness.gate.judgement.evaluate_cell``); each failed check is either a gate failure or, when the limits declare it
a known limitation, expected. A known limitation whose check now passes is an XPASS, which fails
strictly: the limits file must be updated. A check judged on its interval can also be undecided:
that is no failure, and a known limitation that is undecided stays expected, reported as borderline
(a different seed must not turn it into an XPASS).

>>> from laya_robustness.gate.results import CheckResult
>>> ok = CheckResult("text", "vsr", "max_flip", True, 0.05, 0.1, None, "flip rate 0.05 <= max_flip 0.1")
>>> bad = CheckResult("text", "vsr", "max_drop", False, -0.2, 0.05, (-0.3, -0.1), "...")
>>> cell_verdict([ok], lambda check: None).outcome
'pass'
>>> cell_verdict([ok, bad], lambda check: "never learned" if check == "max_drop" else None).outcome
'xfail'
>>> cell_verdict([ok, bad], lambda check: "old reason" if check == "max_flip" else None).outcome
'fail'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from laya_robustness.gate.results import NOT_APPLICABLE, CheckResult

PASS, FAIL, XFAIL, XPASS = "pass", "fail", "xfail", "xpass"


@dataclass(frozen=True)
class Verdict:
    """The outcome of a cell and what to say about it.

    ``failures``: the failed checks that are not known limitations; ``expected``: (check, reason) of
    the known limitations that still fail or are borderline (undecided); ``fixed``: the known limitations
    whose check now passes; ``undecided``: the checks the evidence decides neither way; ``not_applicable``: the
    checks the run cannot have the statistic of (they decide nothing; a cell of them alone is NOT_APPLICABLE).
    """

    outcome: str
    failures: tuple[CheckResult, ...] = ()
    expected: tuple[tuple[CheckResult, str], ...] = ()
    fixed: tuple[CheckResult, ...] = ()
    undecided: tuple[CheckResult, ...] = ()
    not_applicable: tuple[CheckResult, ...] = ()


def cell_verdict(results: Sequence[CheckResult], known: Callable[[str], str | None]) -> Verdict:
    """The verdict of one cell from its check results; ``known(check)`` is the reason of a declared
    known limitation of that check on this cell, or None.

    fail when a check fails that is not a known limitation (whatever else holds); else xpass when a
    known limitation now passes; else xfail when a known limitation still fails; else pass; and
    NOT_APPLICABLE when every check is.
    """
    failures, expected, fixed = [], [], []
    inapplicable = tuple(r for r in results if r.decision == NOT_APPLICABLE)
    for r in results:
        reason = known(r.check)
        if r.decision == NOT_APPLICABLE:
            continue
        if reason is not None and r.decision == "undecided":
            expected.append((r, f"borderline (the evidence decides neither way: {r.detail}); declared: {reason}"))
        elif reason is not None and not r.passed:
            expected.append((r, reason))
        elif reason is not None:
            fixed.append(r)
        elif not r.passed:
            failures.append(r)
    outcome = FAIL if failures else XPASS if fixed else XFAIL if expected else PASS
    if results and len(inapplicable) == len(results):
        outcome = NOT_APPLICABLE
    undecided = tuple(r for r in results if r.decision == "undecided")
    return Verdict(outcome, tuple(failures), tuple(expected), tuple(fixed), undecided, inapplicable)
