"""The result of one limit checked on one cell: what was compared, the decision and why."""

from __future__ import annotations

from dataclasses import dataclass

#: The family of an invariance check's result (its dataset is the condition).
INVARIANCE = "invariance"
#: The decision of a limit whose statistic the run cannot have (``max_ece`` of a generation-only scorer): it fails
#: nothing and passes nothing, and says why.
NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class CheckResult:
    """One limit checked on one cell; for invariance, family is "invariance" and dataset the condition.

    ``decision`` is "fail", "pass" or, for a limit judged on its interval whose evidence goes neither
    way at the gate's error rate, "undecided" (which does not fail the gate), or ``NOT_APPLICABLE`` for a limit
    whose statistic the run cannot have (``value`` None, ``detail`` says why); ``passed`` is
    ``decision != "fail"``. ``se`` is the statistic's bootstrap standard error, ``z`` its distance past
    the limit in standard errors (positive: toward a violation), ``rows_needed`` the source rows per set
    that would tell a 5-point change from none at this error rate (interval-judged checks).
    """

    family: str
    dataset: str
    check: str
    passed: bool
    value: float | None
    limit: float
    interval: tuple[float, float] | None
    detail: str
    judge: str = "point"
    decision: str = ""
    se: float | None = None
    z: float | None = None
    rows_needed: int | None = None

    def __post_init__(self):
        if not self.decision:
            object.__setattr__(self, "decision", "pass" if self.passed else "fail")


def fmt(x: float) -> str:
    """A number as the gate's messages print it (6 significant digits)."""
    return f"{x:.6g}"
