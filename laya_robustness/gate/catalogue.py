"""The gate's checks, each declared once: its name, where its limit may lie, its point rule, its interval rule,
how a failure is worded and which rows it blames. The limits schema, the judgement and the failure messages
all read these declarations; adding a check is one entry here (and its test).

Every point rule is written as the condition to *pass*, so a NaN value or interval fails instead of
slipping through.

>>> CHECKS[:3]
('max_flip', 'max_drop', 'min_gap')
>>> check_kind("max_drop").rule.format(limit=0.05)
'upper end of the delta interval >= -0.05'
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from laya_robustness.gate import worst
from laya_robustness.gate.results import INVARIANCE, NOT_APPLICABLE, CheckResult, fmt

Cell = Mapping[str, Any]
PointRule = Callable[[str, str, Cell, float], CheckResult]


def _where(family: str, dataset: str) -> str:
    return f"{family}/{dataset}"


def metric(cell: Cell, key: str, check: str, where: str) -> float:
    """cell[key] as a float; absent or None (undefined) raises KeyError naming the metric."""
    if key not in cell:
        has = ", ".join(sorted(cell))
        raise KeyError(f"{where}: check {check} needs metric {key!r}, which the cell lacks (it has: {has})")
    value = cell[key]
    if value is None:
        raise KeyError(f"{where}: check {check} needs metric {key!r}, which is undefined (None) on this cell")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{where}: metric {key!r} must be a number, got {value!r}")
    return float(value)


def interval(cell: Cell, key: str, check: str, where: str, required: bool) -> tuple[float, float] | None:
    """cell[key] as (lo, hi); None when optional and absent; required and absent raises KeyError."""
    if cell.get(key) is None:
        if required:
            metric(cell, key, check, where)  # raises the KeyError
        return None
    value = cell[key]
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise TypeError(f"{where}: interval {key!r} must be [lo, hi], got {value!r}")
    return (float(value[0]), float(value[1]))


# -- point rules ------------------------------------------------------------------------------------------


def at_most(key: str, name: str) -> PointRule:
    """value <= limit (a point estimate); the interval is shown when the cell has one."""

    def rule(family: str, dataset: str, cell: Cell, limit: float, check: str = "") -> CheckResult:
        where = _where(family, dataset)
        value = metric(cell, key, check, where)
        passed = value <= limit
        detail = f"{name} {fmt(value)} {'<=' if passed else '>'} {check} {fmt(limit)}"
        return CheckResult(family, dataset, check, passed, value, limit, interval(cell, f"{key}_ci", check, where, False),
                           detail)

    return rule


def _min_acc(family, dataset, cell, limit, check="min_acc"):
    where = _where(family, dataset)
    value = metric(cell, "acc", check, where)
    passed = value >= limit
    detail = f"accuracy {fmt(value)} {'>=' if passed else '<'} min_acc {fmt(limit)}"
    return CheckResult(family, dataset, check, passed, value, limit, interval(cell, "acc_ci", check, where, False),
                       detail)


def _min_pr(family, dataset, cell, limit, check="min_pr"):
    """The worst attribute's positive rate (``pr_min``, attribute ``pr_min_attribute``) >= limit."""
    value = metric(cell, "pr_min", check, _where(family, dataset))
    attribute = cell.get("pr_min_attribute", "?")
    passed = value >= limit
    detail = f"positive rate of {attribute} flips {fmt(value)} {'>=' if passed else '<'} min_pr {fmt(limit)}"
    by_attribute = (cell.get("sensitivity") or {}).get("by_attribute", {})
    ci = (by_attribute.get(attribute) or {}).get("pr_ci")
    return CheckResult(family, dataset, check, passed, value, limit, (float(ci[0]), float(ci[1])) if ci else None,
                       detail)


def _min_acc_over_chance(family, dataset, cell, limit, check="min_acc_over_chance"):
    """acc - chance >= limit: the accuracy clears the cell's chance rate (mean 1/k) by the margin."""
    where = _where(family, dataset)
    acc, chance = metric(cell, "acc", check, where), metric(cell, "chance", check, where)
    value = acc - chance
    passed = value >= limit
    detail = (f"accuracy {fmt(acc)} - chance {fmt(chance)} = {fmt(value)} "
              f"{'>=' if passed else '<'} min_acc_over_chance {fmt(limit)}")
    ci = interval(cell, "acc_ci", check, where, False)
    if ci is not None:
        ci = (ci[0] - chance, ci[1] - chance)
    return CheckResult(family, dataset, check, passed, value, limit, ci, detail)


def _max_drop(family, dataset, cell, limit, check="max_drop"):
    """Fails only when the paired delta's whole interval lies below -limit (delta_ci[1] < -limit)."""
    where = _where(family, dataset)
    value = metric(cell, "delta", check, where)
    lo, hi = interval(cell, "delta_ci", check, where, True)
    passed = hi >= -limit
    detail = (
        f"paired delta vs orig {value:+.6g}, 95% interval [{fmt(lo)}, {fmt(hi)}]; its upper end "
        f"{'is not' if passed else 'is'} below -max_drop = {fmt(-limit)}"
    )
    return CheckResult(family, dataset, check, passed, value, limit, (lo, hi), detail)


def _max_regression(family, dataset, cell, limit, check="max_regression"):
    """Against a baseline: fails when the paired accuracy change's whole interval lies below -limit."""
    where = _where(family, dataset)
    value = metric(cell, "acc_diff", check, where)
    lo, hi = interval(cell, "acc_diff_ci", check, where, True)
    passed = hi >= -limit
    detail = (f"accuracy change vs the baseline {value:+.6g}, 95% interval [{fmt(lo)}, {fmt(hi)}]; its upper "
              f"end {'is not' if passed else 'is'} below -max_regression = {fmt(-limit)}")
    return CheckResult(family, dataset, check, passed, value, limit, (lo, hi), detail)


def _max_flip_regression(family, dataset, cell, limit, check="max_flip_regression"):
    """Against a baseline: fails when the paired flip-rate change's whole interval lies above +limit."""
    where = _where(family, dataset)
    value = metric(cell, "flip_diff", check, where)
    lo, hi = interval(cell, "flip_diff_ci", check, where, True)
    passed = lo <= limit
    detail = (f"flip-rate change vs the baseline {value:+.6g}, 95% interval [{fmt(lo)}, {fmt(hi)}]; its lower "
              f"end {'is not' if passed else 'is'} above max_flip_regression = {fmt(limit)}")
    return CheckResult(family, dataset, check, passed, value, limit, (lo, hi), detail)


def _min_gap(family, dataset, cell, limit, check="min_gap"):
    """A control: gap = -delta >= limit, and the gap's interval [-delta_ci[1], -delta_ci[0]] excludes 0."""
    where = _where(family, dataset)
    gap = -metric(cell, "delta", check, where)
    d_lo, d_hi = interval(cell, "delta_ci", check, where, True)
    lo, hi = -d_hi, -d_lo
    big, clear = gap >= limit, lo > 0
    problems = []
    if not big:
        problems.append(f"gap {fmt(gap)} < min_gap {fmt(limit)}")
    if not clear:
        problems.append(f"the gap's 95% interval [{fmt(lo)}, {fmt(hi)}] does not exclude 0")
    detail = (
        "; ".join(problems) if problems
        else f"gap {fmt(gap)} >= min_gap {fmt(limit)} and its 95% interval [{fmt(lo)}, {fmt(hi)}] excludes 0"
    )
    detail += " (gap = orig acc - family acc)"
    return CheckResult(family, dataset, check, big and clear, gap, limit, (lo, hi), detail)


# -- the catalogue ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckKind:
    """One check a limits file can set on a (family, dataset) cell.

    ``low`` / ``high`` bound its limit. ``point`` is the rule on the point estimate(s). The interval rule
    reads ``statistic`` (the cell value the check compares; shown by this name) with standard error
    ``se_key``: the statistic must stay below its bound when ``upper``, above it otherwise; the bound is
    the limit, or -limit when ``negated``. ``what`` and ``rule`` word a failure (``rule`` with
    ``{limit}``); ``worst`` ranks the groups that contribute most to a failure
    (``laya_robustness.gate.worst``). A check in ``point_by_default`` is judged on its point estimate
    unless a limit asks otherwise. ``needs`` names what the statistic is computed from where a run may lack it
    (``"probabilities"``): a cell that holds a reason under that key (``records.NO_PROBABILITIES``) makes the
    check not applicable (:meth:`not_applicable`).
    """

    name: str
    low: float
    high: float
    point: PointRule
    statistic: str
    se_key: str
    upper: bool
    what: str
    rule: str
    worst: Callable
    negated: bool = False
    point_by_default: bool = False
    needs: str | None = None

    def evaluate(self, family: str, dataset: str, cell: Cell, limit: float) -> CheckResult:
        """The point rule's result for this cell (not applicable when the cell lacks what the check ``needs``)."""
        missing = unavailable(self.needs, cell)
        if missing:
            return CheckResult(family, dataset, self.name, True, None, limit, None,
                               f"{self.name} not applicable: {self.what} needs {self.needs}, {missing}",
                               decision=NOT_APPLICABLE)
        return self.point(family, dataset, cell, limit, check=self.name)

    def bound(self, limit: float) -> float:
        """The value the statistic is compared with on its interval."""
        return -limit if self.negated else limit


_KINDS = (
    CheckKind("max_flip", 0.0, 1.0, at_most("flip", "flip rate"), "flip", "flip_se", True,
              "flip rate", "flip rate <= {limit}", worst.worst_flip),
    CheckKind("max_drop", 0.0, 1.0, _max_drop, "delta", "delta_se", False,
              "paired delta vs orig", "upper end of the delta interval >= -{limit}", worst.worst_drop, negated=True),
    CheckKind("min_gap", -1.0, 1.0, _min_gap, "gap", "delta_se", False,
              "gap = orig acc - family acc", "gap >= {limit} and the gap's interval excludes 0", worst.worst_gap),
    CheckKind("min_acc", 0.0, 1.0, _min_acc, "acc", "acc_se", False,
              "accuracy", "accuracy >= {limit}", worst.worst_acc),
    CheckKind("max_ece", 0.0, 1.0, at_most("ece", "ECE"), "ece", "ece_se", True,
              "ECE", "ECE <= {limit}", worst.worst_ece, point_by_default=True,  # ECE's bootstrap is biased upward
              needs="probabilities"),
    CheckKind("max_asr", 0.0, 1.0, at_most("asr", "attack success rate"), "asr", "asr_se", True,
              "attack success rate", "attack success rate <= {limit}", worst.worst_asr),
    CheckKind("min_acc_over_chance", -1.0, 1.0, _min_acc_over_chance, "acc - chance", "acc_se", False,
              "accuracy - chance", "accuracy - chance >= {limit}", worst.worst_acc),
    CheckKind("max_av", 0.0, 1.0, at_most("av", "share of changed instances (AV)"), "av", "av_se", True,
              "share of changed instances (AV)", "AV <= {limit}", worst.worst_flip),
    CheckKind("max_v", 0.0, 1.0, at_most("v", "share of samples changed at least once (V)"), "v", "v_se", True,
              "share of samples changed at least once (V)", "V <= {limit}", worst.worst_flip),
    # |s - s'| of cosine similarities lies in [0, 2]
    CheckKind("max_e_inv", 0.0, 2.0, at_most("e_inv", "invariance error E_inv"), "e_inv", "e_inv_se", True,
              "invariance error E_inv", "E_inv <= {limit}", worst.worst_lgip),
    CheckKind("min_pr", 0.0, 1.0, _min_pr, "pr_min", "pr_min_se", False,
              "the worst attribute's positive rate", "PR of every attribute >= {limit}", worst.worst_lgip),
    CheckKind("max_regression", 0.0, 1.0, _max_regression, "acc_diff", "acc_diff_se", False,
              "accuracy change vs the baseline", "no loss past {limit} beyond noise at the pair's level",
              worst.worst_drop,
              negated=True),
    CheckKind("max_flip_regression", 0.0, 1.0, _max_flip_regression, "flip_diff", "flip_diff_se", True,
              "flip-rate change vs the baseline", "no rise past {limit} beyond noise at the pair's level",
              worst.worst_flip),
)
#: name -> declaration, in the order a cell's checks are evaluated.
CATALOGUE: dict[str, CheckKind] = {k.name: k for k in _KINDS}
CHECKS = tuple(CATALOGUE)
#: Checks judged on their point estimate unless a limit says otherwise.
POINT_BY_DEFAULT = tuple(k.name for k in _KINDS if k.point_by_default)
#: The checks of a family against a ``--baseline`` (set in ``[gate]``, not per family).
REGRESSION_CHECKS = ("max_regression", "max_flip_regression")


def unavailable(needs: str | None, cell: Mapping[str, Any]) -> str | None:
    """Why ``cell`` (a summary cell or invariance stats) lacks what a check ``needs`` (the reason it holds under
    that key, e.g. "not available for a generation-only scorer"), or None when it has it."""
    reason = cell.get(needs) if needs else None
    return reason if isinstance(reason, str) else None


def unknown(kind: str, name: str, known) -> str:
    """'unknown <kind> 'x'; did you mean ...? (known: ...)'."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r}{hint} (known: {', '.join(known) or 'none'})"


def check_kind(name: str) -> CheckKind:
    """The declaration of check ``name``; an unknown name raises ValueError with the closest known names."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(unknown("check", name, CHECKS)) from None


# -- invariance checks ------------------------------------------------------------------------------------


def _stat(stats: Mapping[str, Any], key: str, condition: str) -> Any:
    if stats.get(key) is None:
        has = ", ".join(sorted(stats))
        raise KeyError(f"invariance/{condition}: needs stat {key!r}, which is missing (it has: {has})")
    return stats[key]


def _number_stat(stats: Mapping[str, Any], key: str, condition: str) -> float:
    value = _stat(stats, key, condition)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"invariance/{condition}: stat {key!r} must be a number, got {value!r}")
    return float(value)


def _bitwise(condition: str, stats: Mapping[str, Any], limit) -> CheckResult:
    same = _stat(stats, "bitwise", condition)
    if not isinstance(same, bool):
        raise TypeError(f"invariance/{condition}: stat 'bitwise' must be a bool, got {same!r}")
    compared = stats.get("compared", "logits")  # a served model's answers: their texts (and logits, if any)
    detail = f"{compared} bitwise identical" if same else f"{compared} are not bitwise identical"
    return CheckResult(INVARIANCE, condition, "bitwise", same, float(same), 1.0, None, detail)


def _max_flips(condition: str, stats: Mapping[str, Any], limit) -> CheckResult:
    flips = _number_stat(stats, "flips", condition)
    passed = flips <= limit
    detail = f"argmax flips {flips:g} {'<=' if passed else '>'} max_flips {limit}"
    return CheckResult(INVARIANCE, condition, "max_flips", passed, flips, float(limit), None, detail)


def _below(key: str) -> Callable:
    def rule(condition: str, stats: Mapping[str, Any], limit) -> CheckResult:
        value, limit = _number_stat(stats, key, condition), float(limit)
        passed = value < limit
        detail = f"{key} {fmt(value)} {'<' if passed else '>='} limit {fmt(limit)}"
        return CheckResult(INVARIANCE, condition, key, passed, value, limit, None, detail)

    return rule


@dataclass(frozen=True)
class InvarianceCheck:
    """One limit an ``[invariance.<condition>]`` table can set: the kind of value it takes (``"bool"``, a count
    ``"count"`` >= 0, or a strictly positive ``"bound"`` on |d|), its rule and its wording; ``needs`` as for
    :class:`CheckKind` (stats without logits make |dp| and |dlogit| not applicable)."""

    name: str
    value: str
    rule_of: Callable[[str, Mapping[str, Any], Any], CheckResult]
    what: str
    rule: str
    needs: str | None = None

    def evaluate(self, condition: str, stats: Mapping[str, Any], limit) -> CheckResult:
        """The rule's result on the condition's stats (not applicable when they lack what the check ``needs``)."""
        missing = unavailable(self.needs, stats)
        if missing:
            return CheckResult(INVARIANCE, condition, self.name, True, None, float(limit), None,
                               f"{self.name} not applicable: {self.what} needs {self.needs}, {missing}",
                               decision=NOT_APPLICABLE)
        return self.rule_of(condition, stats, limit)


_INVARIANCE = (
    InvarianceCheck("bitwise", "bool", _bitwise, "bitwise identical logits (1 = yes, 0 = no)",
                    "logits bitwise identical"),
    InvarianceCheck("max_abs_dp", "bound", _below("max_abs_dp"), "max |delta p|", "max |delta p| < {limit}",
                    needs="probabilities"),
    InvarianceCheck("max_abs_dlogit", "bound", _below("max_abs_dlogit"), "max |delta logit|",
                    "max |delta logit| < {limit}", needs="probabilities"),
    InvarianceCheck("max_flips", "count", _max_flips, "argmax flips", "argmax flips <= {limit}"),
)
INVARIANCE_CATALOGUE: dict[str, InvarianceCheck] = {k.name: k for k in _INVARIANCE}
INVARIANCE_KEYS = tuple(INVARIANCE_CATALOGUE)


def wording(check: str) -> tuple[str, str]:
    """(what the value of ``check`` is, its rule to pass with ``{limit}``), for any check of the gate."""
    kind = CATALOGUE.get(check) or INVARIANCE_CATALOGUE.get(check)
    return (kind.what, kind.rule) if kind else (check, "{limit}")


def is_finite(value: float) -> bool:
    """Whether a number is a finite float (an integer past the float range is not: TOML allows it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
