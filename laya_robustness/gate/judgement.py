"""Judge the gate's limits against a summary cell or invariance stats: on the point estimate, or on the
evidence of the statistic's interval at the gate's error rate. Pure functions: no pytest, no model.

>>> cell = {"acc": 0.8, "acc_ci": [0.7, 0.9], "delta": -0.02, "delta_ci": [-0.06, 0.01], "flip": 0.12}
>>> [(r.check, r.passed) for r in evaluate_cell("text", "vsr", cell, {"max_flip": 0.1, "max_drop": 0.05})]
[('max_flip', False), ('max_drop', True)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Callable, Mapping

from laya_robustness.gate.catalogue import CATALOGUE, CHECKS, INVARIANCE_CATALOGUE, INVARIANCE_KEYS, unknown
from laya_robustness.gate.results import NOT_APPLICABLE, CheckResult, fmt

#: The change a set must be able to tell from none, and the power to tell it with (rows_needed).
EFFECT, POWER = 0.05, 0.8
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Judgement:
    """Which limits are judged on their interval, and each one's one-sided error rate (alpha / m)."""

    judge: Callable[[str], str]
    alpha_each: float


def evaluate_cell(family: str, dataset: str, cell: Mapping[str, Any], limits: Mapping[str, float],
                  judgement: Judgement | None = None) -> list[CheckResult]:
    """One CheckResult per limit, in catalogue order (``laya_robustness.gate.catalogue``).

    - max_flip: flip <= limit;  min_acc: acc >= limit;  max_ece: ece <= limit;  max_asr: asr <= limit;
      min_acc_over_chance: acc - chance >= limit; max_av: av <= limit; max_v: v <= limit;
      max_e_inv: e_inv <= limit; min_pr: pr_min (the worst attribute's PR) >= limit (point estimates;
      a ``<metric>_ci`` in the cell is carried along as the interval).
    - max_drop: fails when delta_ci[1] < -limit (the whole paired interval lies below -limit).
    - min_gap: gap = -delta >= limit and -delta_ci[1] > 0 (the gap's interval excludes 0).

    Without a ``judgement`` every limit is judged on these rules (point estimates); with one, the limits it
    judges on their interval are decided by :func:`judge_on_interval` instead. A check whose statistic the cell
    cannot have (``max_ece`` without probabilities) is ``NOT_APPLICABLE``, saying why.
    A metric the cell lacks (or holds as None) raises KeyError naming it; an unknown check raises ValueError.
    """
    for check in limits:
        if check not in CATALOGUE:
            raise ValueError(unknown("check", check, CHECKS))
    out = []
    for name, kind in CATALOGUE.items():
        if name in limits:
            result = kind.evaluate(family, dataset, cell, float(limits[name]))
            if judgement is not None and judgement.judge(name) == "interval" and result.decision != NOT_APPLICABLE:
                result = judge_on_interval(result, cell, judgement.alpha_each)
            out.append(result)
    return out


def _standard_error(cell: Mapping[str, Any], key: str, statistic: str) -> float | None:
    """The cell's ``<statistic>_se``, else the width of its 95% interval / 3.92, else None."""
    if cell.get(key) is not None:
        return float(cell[key])
    ci = cell.get(statistic.split(" ")[0] + "_ci") if key.endswith("_se") else None
    if ci and all(isinstance(v, (int, float)) for v in ci):
        return (float(ci[1]) - float(ci[0])) / (2 * _NORMAL.inv_cdf(0.975))
    return None


def judge_on_interval(result: CheckResult, cell: Mapping[str, Any], alpha_each: float) -> CheckResult:
    """Decide a limit on the evidence: with the statistic's bootstrap standard error SE and
    z = (distance of the statistic past its bound, toward a violation) / SE,

        fail       when z > z_crit        (the one-sided (1 - alpha_each) bound lies past the limit),
        pass       when z < -z_crit       (it lies clearly within the limit),
        undecided  otherwise               (sampling noise could put it on either side),

    z_crit = Phi^-1(1 - alpha_each). With no standard error (or SE 0) the point rule stands. rows_needed
    = n x ((z_crit + Phi^-1(POWER)) SE / EFFECT)^2, n the cell's groups: the rows per set at which a
    change of EFFECT would be found with probability POWER.
    """
    kind = CATALOGUE[result.check]
    bound = kind.bound(result.limit)
    se = _standard_error(cell, kind.se_key, kind.statistic)
    z_crit = _NORMAL.inv_cdf(1 - alpha_each)
    if not se:
        return replace(result, judge="interval", se=se)
    z = ((result.value - bound) if kind.upper else (bound - result.value)) / se
    decision = "fail" if z > z_crit else "pass" if z < -z_crit else "undecided"
    n = cell.get("n_groups") or cell.get("n_paired") or 0
    needed = math.ceil(n * ((z_crit + _NORMAL.inv_cdf(POWER)) * se / EFFECT) ** 2) if n else None
    words = {"fail": "its bound lies past the limit", "pass": "it lies clearly within the limit",
             "undecided": "sampling noise could put it on either side: not a failure"}[decision]
    detail = (f"{kind.statistic} {fmt(result.value)} against {result.check} {fmt(result.limit)}, SE {fmt(se)}: "
              f"z = {z:+.2f} against +/-{z_crit:.2f} (one-sided alpha {alpha_each:.3g}); {words}")
    return replace(result, passed=decision != "fail", judge="interval", decision=decision, se=se, z=z,
                   rows_needed=needed, detail=detail)


def evaluate_invariance(condition: str, stats: Mapping[str, Any], limits: Mapping[str, Any]) -> list[CheckResult]:
    """One CheckResult per limit, in INVARIANCE_KEYS order (family "invariance", dataset = condition).

    bitwise = true: stats["bitwise"] must be True (``bitwise = false`` asks for nothing and gives no result;
    the limits file refuses it alone); max_abs_dp / max_abs_dlogit: the stat must be strictly below the
    limit; max_flips: flips <= limit.
    """
    for key in limits:
        if key not in INVARIANCE_CATALOGUE:
            raise ValueError(unknown("invariance key", key, INVARIANCE_KEYS))
    out = []
    for key, kind in INVARIANCE_CATALOGUE.items():
        if key in limits and not (kind.value == "bool" and not limits[key]):
            out.append(kind.evaluate(condition, stats, limits[key]))
    return out
