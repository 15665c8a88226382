"""Evaluate the gate's limits against a summary cell or invariance stats, and explain a failure.

Pure functions: no pytest, no model. Every comparison is written as the condition to *pass*, so a
NaN value or interval fails instead of slipping through.

>>> cell = {"acc": 0.8, "acc_ci": [0.7, 0.9], "delta": -0.02, "delta_ci": [-0.06, 0.01], "flip": 0.12}
>>> [(r.check, r.passed) for r in evaluate_cell("text", "vsr", cell, {"max_flip": 0.1, "max_drop": 0.05})]
[('max_flip', False), ('max_drop', True)]
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Callable, Iterable, Mapping, Sequence

from laya_robustness.metrics.accuracy import group_means
from laya_robustness.records import ORIG
from laya_robustness.thresholds import CHECKS, INVARIANCE_KEYS

INVARIANCE = "invariance"


@dataclass(frozen=True)
class CheckResult:
    """One limit checked on one cell; for invariance, family is "invariance" and dataset the condition.

    ``decision`` is "fail", "pass" or, for a limit judged on its interval whose evidence goes neither
    way at the gate's error rate, "undecided" (which does not fail the gate); ``passed`` is
    ``decision != "fail"``. ``se`` is the statistic's bootstrap standard error, ``z`` its distance past
    the limit in standard errors (positive: toward a violation), ``rows_needed`` the source rows per set
    that would tell a 5-point change from none at this error rate (interval-judged checks).
    """

    family: str
    dataset: str
    check: str
    passed: bool
    value: float
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


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _where(family: str, dataset: str) -> str:
    return f"{family}/{dataset}"


def _metric(cell: Mapping[str, Any], key: str, check: str, where: str) -> float:
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


def _interval(cell: Mapping[str, Any], key: str, check: str, where: str, required: bool) -> tuple[float, float] | None:
    """cell[key] as (lo, hi); None when optional and absent; required and absent raises KeyError."""
    if cell.get(key) is None:
        if required:
            _metric(cell, key, check, where)  # raises the KeyError
        return None
    value = cell[key]
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise TypeError(f"{where}: interval {key!r} must be [lo, hi], got {value!r}")
    return (float(value[0]), float(value[1]))


def _upper(family, dataset, check, cell, limit, metric, name) -> CheckResult:
    """value <= limit (a point estimate); the interval is shown when the cell has one."""
    where = _where(family, dataset)
    value = _metric(cell, metric, check, where)
    passed = value <= limit
    detail = f"{name} {_fmt(value)} {'<=' if passed else '>'} {check} {_fmt(limit)}"
    interval = _interval(cell, f"{metric}_ci", check, where, False)
    return CheckResult(family, dataset, check, passed, value, limit, interval, detail)


def _max_flip(family, dataset, cell, limit):
    return _upper(family, dataset, "max_flip", cell, limit, "flip", "flip rate")


def _max_ece(family, dataset, cell, limit):
    return _upper(family, dataset, "max_ece", cell, limit, "ece", "ECE")


def _max_asr(family, dataset, cell, limit):
    return _upper(family, dataset, "max_asr", cell, limit, "asr", "attack success rate")


def _max_av(family, dataset, cell, limit):
    return _upper(family, dataset, "max_av", cell, limit, "av", "share of changed instances (AV)")


def _max_v(family, dataset, cell, limit):
    return _upper(family, dataset, "max_v", cell, limit, "v", "share of samples changed at least once (V)")


def _max_e_inv(family, dataset, cell, limit):
    return _upper(family, dataset, "max_e_inv", cell, limit, "e_inv", "invariance error E_inv")


def _min_pr(family, dataset, cell, limit):
    """The worst attribute's positive rate (``pr_min``, attribute ``pr_min_attribute``) >= limit."""
    where = _where(family, dataset)
    value = _metric(cell, "pr_min", "min_pr", where)
    attribute = cell.get("pr_min_attribute", "?")
    passed = value >= limit
    detail = f"positive rate of {attribute} flips {_fmt(value)} {'>=' if passed else '<'} min_pr {_fmt(limit)}"
    by_attribute = (cell.get("sensitivity") or {}).get("by_attribute", {})
    ci = (by_attribute.get(attribute) or {}).get("pr_ci")
    interval = (float(ci[0]), float(ci[1])) if ci else None
    return CheckResult(family, dataset, "min_pr", passed, value, limit, interval, detail)


def _min_acc(family, dataset, cell, limit):
    where = _where(family, dataset)
    value = _metric(cell, "acc", "min_acc", where)
    passed = value >= limit
    detail = f"accuracy {_fmt(value)} {'>=' if passed else '<'} min_acc {_fmt(limit)}"
    interval = _interval(cell, "acc_ci", "min_acc", where, False)
    return CheckResult(family, dataset, "min_acc", passed, value, limit, interval, detail)


def _min_acc_over_chance(family, dataset, cell, limit):
    """acc - chance >= limit: the accuracy clears the cell's chance rate (mean 1/k) by the margin."""
    where = _where(family, dataset)
    acc, chance = _metric(cell, "acc", "min_acc_over_chance", where), _metric(cell, "chance", "min_acc_over_chance", where)
    value = acc - chance
    passed = value >= limit
    detail = (f"accuracy {_fmt(acc)} - chance {_fmt(chance)} = {_fmt(value)} "
              f"{'>=' if passed else '<'} min_acc_over_chance {_fmt(limit)}")
    interval = _interval(cell, "acc_ci", "min_acc_over_chance", where, False)
    if interval is not None:
        interval = (interval[0] - chance, interval[1] - chance)
    return CheckResult(family, dataset, "min_acc_over_chance", passed, value, limit, interval, detail)


def _max_drop(family, dataset, cell, limit):
    """Fails only when the paired delta's whole interval lies below -limit (delta_ci[1] < -limit)."""
    where = _where(family, dataset)
    value = _metric(cell, "delta", "max_drop", where)
    lo, hi = _interval(cell, "delta_ci", "max_drop", where, True)
    passed = hi >= -limit
    detail = (
        f"paired delta vs orig {value:+.6g}, 95% interval [{_fmt(lo)}, {_fmt(hi)}]; its upper end "
        f"{'is not' if passed else 'is'} below -max_drop = {_fmt(-limit)}"
    )
    return CheckResult(family, dataset, "max_drop", passed, value, limit, (lo, hi), detail)


def _max_regression(family, dataset, cell, limit):
    """Against a baseline: fails when the paired accuracy change's whole interval lies below -limit."""
    where = _where(family, dataset)
    value = _metric(cell, "acc_diff", "max_regression", where)
    lo, hi = _interval(cell, "acc_diff_ci", "max_regression", where, True)
    passed = hi >= -limit
    detail = (f"accuracy change vs the baseline {value:+.6g}, 95% interval [{_fmt(lo)}, {_fmt(hi)}]; its upper "
              f"end {'is not' if passed else 'is'} below -max_regression = {_fmt(-limit)}")
    return CheckResult(family, dataset, "max_regression", passed, value, limit, (lo, hi), detail)


def _max_flip_regression(family, dataset, cell, limit):
    """Against a baseline: fails when the paired flip-rate change's whole interval lies above +limit."""
    where = _where(family, dataset)
    value = _metric(cell, "flip_diff", "max_flip_regression", where)
    lo, hi = _interval(cell, "flip_diff_ci", "max_flip_regression", where, True)
    passed = lo <= limit
    detail = (f"flip-rate change vs the baseline {value:+.6g}, 95% interval [{_fmt(lo)}, {_fmt(hi)}]; its lower "
              f"end {'is not' if passed else 'is'} above max_flip_regression = {_fmt(limit)}")
    return CheckResult(family, dataset, "max_flip_regression", passed, value, limit, (lo, hi), detail)


def _min_gap(family, dataset, cell, limit):
    """A control: gap = -delta >= limit, and the gap's interval [-delta_ci[1], -delta_ci[0]] excludes 0."""
    where = _where(family, dataset)
    gap = -_metric(cell, "delta", "min_gap", where)
    d_lo, d_hi = _interval(cell, "delta_ci", "min_gap", where, True)
    lo, hi = -d_hi, -d_lo
    big, clear = gap >= limit, lo > 0
    problems = []
    if not big:
        problems.append(f"gap {_fmt(gap)} < min_gap {_fmt(limit)}")
    if not clear:
        problems.append(f"the gap's 95% interval [{_fmt(lo)}, {_fmt(hi)}] does not exclude 0")
    detail = (
        "; ".join(problems) if problems
        else f"gap {_fmt(gap)} >= min_gap {_fmt(limit)} and its 95% interval [{_fmt(lo)}, {_fmt(hi)}] excludes 0"
    )
    detail += " (gap = orig acc - family acc)"
    return CheckResult(family, dataset, "min_gap", big and clear, gap, limit, (lo, hi), detail)


_EVALUATORS: dict[str, Callable[[str, str, Mapping[str, Any], float], CheckResult]] = {
    "max_flip": _max_flip,
    "max_drop": _max_drop,
    "min_gap": _min_gap,
    "min_acc": _min_acc,
    "max_ece": _max_ece,
    "max_asr": _max_asr,
    "min_acc_over_chance": _min_acc_over_chance,
    "max_av": _max_av,
    "max_v": _max_v,
    "max_e_inv": _max_e_inv,
    "min_pr": _min_pr,
    "max_regression": _max_regression,
    "max_flip_regression": _max_flip_regression,
}
assert tuple(_EVALUATORS) == CHECKS


def regression_limits(gate, family: str, cell: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The limits a family is held to against a --baseline (``gate``: the limits file's [gate]):
    ``max_regression`` (accuracy) for every family, ``max_flip_regression`` (flip rate) too for a
    meaning-preserving one. With its baseline ``cell``, only the limits it has groups for; a limit the
    file unsets is left out."""
    from laya_robustness.metrics.baseline import compares_flips

    limits = {"max_regression": gate.max_regression}
    if compares_flips(family):
        limits["max_flip_regression"] = gate.max_flip_regression
    if cell is not None:
        if not cell.get("n_groups"):
            limits.pop("max_regression")
        if not cell.get("n_flip_groups"):
            limits.pop("max_flip_regression", None)
    return {check: limit for check, limit in limits.items() if limit is not None}


def _unknown(kind: str, name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"


def evaluate_cell(family: str, dataset: str, cell: Mapping[str, Any], limits: Mapping[str, float],
                  judgement: "Judgement | None" = None) -> list[CheckResult]:
    """One CheckResult per limit, in CHECKS order.

    - max_flip: flip <= limit;  min_acc: acc >= limit;  max_ece: ece <= limit;  max_asr: asr <= limit;
      min_acc_over_chance: acc - chance >= limit; max_av: av <= limit; max_v: v <= limit;
      max_e_inv: e_inv <= limit; min_pr: pr_min (the worst attribute's PR) >= limit (point estimates;
      a ``<metric>_ci`` in the cell is carried along as the interval).
    - max_drop: fails when delta_ci[1] < -limit (the whole paired interval lies below -limit).
    - min_gap: gap = -delta >= limit and -delta_ci[1] > 0 (the gap's interval excludes 0).

    Without a ``judgement`` every limit is judged on these rules (point estimates); with one, the limits it
    judges on their interval are decided by :func:`judge_on_interval` instead.
    A metric the cell lacks (or holds as None) raises KeyError naming it; an unknown check raises ValueError.
    """
    for check in limits:
        if check not in _EVALUATORS:
            raise ValueError(_unknown("check", check, CHECKS))
    out = []
    for c in CHECKS:
        if c in limits:
            result = _EVALUATORS[c](family, dataset, cell, float(limits[c]))
            if judgement is not None and judgement.judge(c) == "interval":
                result = judge_on_interval(result, cell, judgement.alpha_each)
            out.append(result)
    return out


# ------------------------------------------------------------------------------------ judged on intervals

#: check -> (the statistic it reads, its standard error's key, True when the statistic must stay below the
#: bound), the bound being the limit except for max_drop (-limit) and the gap of min_gap (value = -delta).
_INTERVAL_RULES = {
    "max_flip": ("flip", "flip_se", True),
    "max_drop": ("delta", "delta_se", False),
    "min_gap": ("gap", "delta_se", False),
    "min_acc": ("acc", "acc_se", False),
    "max_ece": ("ece", "ece_se", True),
    "max_asr": ("asr", "asr_se", True),
    "min_acc_over_chance": ("acc - chance", "acc_se", False),
    "max_av": ("av", "av_se", True),
    "max_v": ("v", "v_se", True),
    "max_e_inv": ("e_inv", "e_inv_se", True),
    "min_pr": ("pr_min", "pr_min_se", False),
    "max_regression": ("acc_diff", "acc_diff_se", False),
    "max_flip_regression": ("flip_diff", "flip_diff_se", True),
}
#: The change a set must be able to tell from none, and the power to tell it with (rows_needed).
EFFECT, POWER = 0.05, 0.8
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Judgement:
    """Which limits are judged on their interval, and each one's one-sided error rate (alpha / m)."""

    judge: Callable[[str], str]
    alpha_each: float


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
    statistic, se_key, upper = _INTERVAL_RULES[result.check]
    bound = -result.limit if result.check in ("max_drop", "max_regression") else result.limit
    se = _standard_error(cell, se_key, statistic)
    z_crit = _NORMAL.inv_cdf(1 - alpha_each)
    if not se:
        return replace(result, judge="interval", se=se)
    z = ((result.value - bound) if upper else (bound - result.value)) / se
    decision = "fail" if z > z_crit else "pass" if z < -z_crit else "undecided"
    n = cell.get("n_groups") or cell.get("n_paired") or 0
    needed = math.ceil(n * ((z_crit + _NORMAL.inv_cdf(POWER)) * se / EFFECT) ** 2) if n else None
    words = {"fail": "its bound lies past the limit", "pass": "it lies clearly within the limit",
             "undecided": "sampling noise could put it on either side: not a failure"}[decision]
    detail = (f"{statistic} {_fmt(result.value)} against {result.check} {_fmt(result.limit)}, SE {_fmt(se)}: "
              f"z = {z:+.2f} against +/-{z_crit:.2f} (one-sided alpha {alpha_each:.3g}); {words}")
    return replace(result, passed=decision != "fail", judge="interval", decision=decision, se=se, z=z,
                   rows_needed=needed, detail=detail)


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


def evaluate_invariance(condition: str, stats: Mapping[str, Any], limits: Mapping[str, Any]) -> list[CheckResult]:
    """One CheckResult per limit, in INVARIANCE_KEYS order (family "invariance", dataset = condition).

    bitwise = true: stats["bitwise"] must be True (bitwise = false asks for nothing and gives no result);
    max_abs_dp / max_abs_dlogit: the stat must be strictly below the limit; max_flips: flips <= limit.
    """
    for key in limits:
        if key not in INVARIANCE_KEYS:
            raise ValueError(_unknown("invariance key", key, INVARIANCE_KEYS))
    out = []
    for key in INVARIANCE_KEYS:
        if key not in limits:
            continue
        if key == "bitwise":
            if not limits[key]:
                continue
            same = _stat(stats, "bitwise", condition)
            if not isinstance(same, bool):
                raise TypeError(f"invariance/{condition}: stat 'bitwise' must be a bool, got {same!r}")
            detail = "logits bitwise identical" if same else "logits are not bitwise identical"
            out.append(CheckResult(INVARIANCE, condition, key, same, float(same), 1.0, None, detail))
        elif key == "max_flips":
            flips = _number_stat(stats, "flips", condition)
            passed = flips <= limits[key]
            detail = f"argmax flips {flips:g} {'<=' if passed else '>'} max_flips {limits[key]}"
            out.append(CheckResult(INVARIANCE, condition, key, passed, flips, float(limits[key]), None, detail))
        else:
            stat = key  # max_abs_dp, max_abs_dlogit
            value, limit = _number_stat(stats, stat, condition), float(limits[key])
            passed = value < limit
            detail = f"{stat} {_fmt(value)} {'<' if passed else '>='} limit {_fmt(limit)}"
            out.append(CheckResult(INVARIANCE, condition, key, passed, value, limit, None, detail))
    return out


#: check -> (what the value is, the rule to pass with {limit} in it)
_MESSAGES = {
    "max_flip": ("flip rate", "flip rate <= {limit}"),
    "max_drop": ("paired delta vs orig", "upper end of the delta interval >= -{limit}"),
    "min_gap": ("gap = orig acc - family acc", "gap >= {limit} and the gap's interval excludes 0"),
    "min_acc": ("accuracy", "accuracy >= {limit}"),
    "max_ece": ("ECE", "ECE <= {limit}"),
    "max_asr": ("attack success rate", "attack success rate <= {limit}"),
    "min_acc_over_chance": ("accuracy - chance", "accuracy - chance >= {limit}"),
    "max_av": ("share of changed instances (AV)", "AV <= {limit}"),
    "max_v": ("share of samples changed at least once (V)", "V <= {limit}"),
    "max_e_inv": ("invariance error E_inv", "E_inv <= {limit}"),
    "min_pr": ("the worst attribute's positive rate", "PR of every attribute >= {limit}"),
    "max_regression": ("accuracy change vs the baseline", "upper end of its interval >= -{limit}"),
    "max_flip_regression": ("flip-rate change vs the baseline", "lower end of its interval <= {limit}"),
    "bitwise": ("bitwise identical logits (1 = yes, 0 = no)", "logits bitwise identical"),
    "max_abs_dp": ("max |delta p|", "max |delta p| < {limit}"),
    "max_abs_dlogit": ("max |delta logit|", "max |delta logit| < {limit}"),
    "max_flips": ("argmax flips", "argmax flips <= {limit}"),
}


def failure_message(result: CheckResult, worst: Sequence[str]) -> str:
    """A multi-line message: family, dataset, metric, value, limit, interval, detail and the worst groups."""
    metric, rule = _MESSAGES.get(result.check, (result.check, "{limit}"))
    interval = "none" if result.interval is None else f"95% [{_fmt(result.interval[0])}, {_fmt(result.interval[1])}]"
    lines = [
        f"{result.family}/{result.dataset}: {result.check} {'passed' if result.passed else 'FAILED'}",
        f"  family:   {result.family}",
        f"  dataset:  {result.dataset}",
        f"  metric:   {metric} = {_fmt(result.value)}",
        f"  limit:    {result.check} = {_fmt(result.limit)} (passes when {rule.format(limit=_fmt(result.limit))})",
        f"  interval: {interval}",
        f"  detail:   {result.detail}",
        f"  worst ({len(worst)}):" if worst else "  worst:    (none given)",
    ]
    lines += [f"    {line}" for line in worst]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- worst groups

_RECORD_FIELDS = ("row_id", "group_id", "dataset", "family", "variant", "label", "argmax")


def _checked(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out = list(records)
    for i, r in enumerate(out):
        missing = [f for f in _RECORD_FIELDS if f not in r]
        if missing:
            raise ValueError(f"record {i} ({r.get('row_id', '?')}) lacks field(s) {', '.join(missing)}")
    return out


def _groups(rows: Iterable[Mapping[str, Any]]) -> dict[str, list]:
    """group_id -> its rows sorted by (variant, row_id)."""
    out: dict[str, list] = defaultdict(list)
    for r in rows:
        out[r["group_id"]].append(r)
    return {g: sorted(rs, key=lambda r: (r["variant"], r["row_id"])) for g, rs in out.items()}


def _origs(records: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r["dataset"] == dataset and r["family"] == ORIG:
            if r["group_id"] in out:
                raise ValueError(f"group {dataset}/{r['group_id']} has more than one unperturbed (orig) row")
            out[r["group_id"]] = r
    return out


def _answers(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{r['variant']}:{r['argmax']}" for r in rows)


def _labels(rows: Sequence[Mapping[str, Any]]) -> str:
    labels = sorted({r["label"] for r in rows})
    if len(labels) == 1:
        return f"label {labels[0]}"
    return "labels " + ", ".join(f"{r['variant']}:{r['label']}" for r in rows)


def _acc(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The accuracy of one group's rows (metrics.accuracy), None without a scored row."""
    means = group_means(rows)
    return next(iter(means.values())) if means else None


def _orig_text(orig: Mapping[str, Any] | None) -> str:
    return "orig answer -" if orig is None else f"orig answer {orig['argmax']} (label {orig['label']})"


def _need_orig(origs: Mapping[str, Any], dataset: str, check: str) -> None:
    if not origs:
        raise ValueError(f"{check} needs the unperturbed (family 'orig') rows of dataset {dataset!r}; none were given")


def _worst_flip(groups, origs, family, dataset):
    """Groups by flip rate against their orig answer, highest first (groups without flips left out)."""
    _need_orig(origs, dataset, "max_flip")
    ranked = []
    for g, rows in groups.items():
        if g in origs:
            flipped = sum(r["argmax"] != origs[g]["argmax"] for r in rows)
            if flipped:
                line = f"{g}: {_orig_text(origs[g])} -> variants {_answers(rows)} ({flipped}/{len(rows)} flipped)"
                ranked.append((-flipped / len(rows), g, line))
    return ranked


def _worst_drop(groups, origs, family, dataset):
    """Groups by accuracy loss against orig, largest first (groups that lose nothing left out)."""
    _need_orig(origs, dataset, "max_drop")
    ranked = []
    for g, rows in groups.items():
        acc, base = _acc(rows), _acc([origs[g]]) if g in origs else None
        if acc is not None and base is not None and base - acc > 0:
            line = (
                f"{g}: acc {base:.2f} -> {acc:.2f} (loss {base - acc:.2f}); "
                f"{_orig_text(origs[g])} -> variants {_answers(rows)}"
            )
            ranked.append((acc - base, g, line))
    return ranked


def _worst_acc(groups, origs, family, dataset):
    """Groups by accuracy, lowest first (fully right groups left out)."""
    ranked = []
    for g, rows in groups.items():
        acc = _acc(rows)
        if acc is not None and acc < 1:
            line = f"{g}: acc {acc:.2f}; {_labels(rows)} -> variants {_answers(rows)}; {_orig_text(origs.get(g))}"
            ranked.append((acc, g, line))
    return ranked


def _worst_gap(groups, origs, family, dataset):
    """Groups still answered right under the control, most right first: they show the image is not needed."""
    ranked = []
    for g, rows in groups.items():
        acc = _acc(rows)
        if acc:
            line = (
                f"{g}: still right under {family} (acc {acc:.2f}); "
                f"{_labels(rows)} -> variants {_answers(rows)}; {_orig_text(origs.get(g))}"
            )
            ranked.append((-acc, g, line))
    return ranked


def _worst_ece(groups, origs, family, dataset):
    """Wrong rows by confidence (max prob), most confident first."""
    ranked = []
    for g, rows in groups.items():
        for r in rows:
            if "probs" not in r or not r["probs"]:
                raise ValueError(f"record {r['row_id']} lacks 'probs', which max_ece needs")
            if r["label"] >= 0 and r["argmax"] != r["label"]:
                conf = max(r["probs"])
                line = (
                    f"{r['row_id']} (group {g}, variant {r['variant']}): "
                    f"answer {r['argmax']} with p={conf:.3f}, label {r['label']}"
                )
                ranked.append((-conf, g, r["row_id"], line))
    return ranked


def _worst_asr(groups, origs, family, dataset):
    """Groups by the share of their variants pulled to the attack target (``meta["target"]``), highest first.

    Only variants whose group's orig answer was not already the target count, as in the ASR itself.
    """
    _need_orig(origs, dataset, "max_asr")
    ranked = []
    for g, rows in groups.items():
        if g not in origs:
            continue
        attackable = [r for r in rows if origs[g]["argmax"] != int(r["meta"]["target"])]
        hits = [r for r in attackable if r["argmax"] == int(r["meta"]["target"])]
        if hits:
            line = (f"{g}: {_orig_text(origs[g])}, target {int(hits[0]['meta']['target'])} -> variants "
                    f"{_answers(attackable)} ({len(hits)}/{len(attackable)} took the target)")
            ranked.append((-len(hits) / len(attackable), g, line))
    return ranked


def _worst_lgip(groups, origs, family, dataset):
    """Captions by the largest similarity change of a variant against the orig caption."""
    ranked = []
    for g, rows in groups.items():
        if g not in origs:
            continue
        s0 = origs[g]["logits"][0]
        worst = max(rows, key=lambda r: (abs(r["logits"][0] - s0), r["row_id"]))
        line = (f"{g}: s(orig) {s0:.4f} -> {worst['variant']} {worst['logits'][0]:.4f} "
                f"({len(rows)} variant(s))")
        ranked.append((-abs(worst["logits"][0] - s0), g, line))
    return ranked


_WORST = {
    "max_flip": _worst_flip,
    "max_drop": _worst_drop,
    "min_gap": _worst_gap,
    "min_acc": _worst_acc,
    "max_ece": _worst_ece,
    "max_asr": _worst_asr,
    "min_acc_over_chance": _worst_acc,
    "max_av": _worst_flip,
    "max_v": _worst_flip,
    "max_e_inv": _worst_lgip,
    "min_pr": _worst_lgip,
    "max_regression": _worst_drop,
    "max_flip_regression": _worst_flip,
}
assert tuple(_WORST) == CHECKS


def worst_groups(records: Iterable[Mapping[str, Any]], family: str, dataset: str, check: str, n: int = 5) -> list[str]:
    """Up to ``n`` ready-made lines naming what contributes most to a failure of ``check`` on the cell.

    max_flip: groups by flip rate; max_asr: by the share of variants pulled to the target; max_drop: by accuracy loss vs orig; min_acc: by
    accuracy, lowest first; min_gap: groups still right under the control; max_ece: wrong rows by
    confidence. Only contributing groups are listed; ties are broken by group_id (then row_id).
    No row of (family, dataset), or no orig row where the rule needs one, raises ValueError.
    """
    if check not in _WORST:
        raise ValueError(_unknown("check", check, CHECKS))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    records = _checked(records)
    rows = [r for r in records if r["dataset"] == dataset and r["family"] == family]
    if not rows:
        raise ValueError(f"no records of family {family!r} on dataset {dataset!r}")
    ranked = _WORST[check](_groups(rows), _origs(records, dataset), family, dataset)
    return [item[-1] for item in sorted(ranked, key=lambda item: item[:-1])[:n]]
