"""A family against a baseline (``--baseline``, ``compare``): its regression limits judged by the one judgement of a
change (``metrics.regression.judge_change``) at the family-wise level of the pair of runs.

The paired headlines judged together are each family's accuracy (``max_regression``) and a meaning-preserving
family's flip rate (``max_flip_regression``) over all its datasets, where ``[gate]`` sets the limit:
``regression_headlines`` counts them, and each is judged at ``alpha / m`` (Bonferroni; ``[gate] alpha``). The limit
is the change the team accepts (the tolerance). Every path that asks "did NEW regress against OLD" (the gate's
``test_no_regression``, ``compare``, ``trend``'s markers and the callback's ``stop_on_fail="regression"``) reads
these results, so the same pair gives the same regressions through each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from laya_robustness.gate.run_limits import regression_limits
from laya_robustness.gate.results import CheckResult, fmt
from laya_robustness.gate.limits_file import CORRECTIONS, Gate
from laya_robustness.metrics.baseline import ALL
from laya_robustness.metrics.regression import ChangeCall, judge_change

#: Each regression check's headline, its paired change and SE in a baseline cell, and its McNemar test.
HEADLINE = {"max_regression": ("acc", "acc_diff", "acc_diff_se", "mcnemar_acc"),
            "max_flip_regression": ("flip", "flip_diff", "flip_diff_se", "mcnemar_flip")}


def regression_headlines(gate: Gate, families: Iterable[str]) -> int:
    """m: the paired headlines a pair of runs is judged on over ``families`` (those both runs hold), each regression
    limit ``[gate]`` sets for each."""
    return sum(len(regression_limits(gate, family)) for family in dict.fromkeys(families))


def regression_level(gate: Gate, families: Iterable[str]) -> float:
    """The level each paired headline is judged at: ``alpha / regression_headlines`` (``alpha`` with ``[gate]
    correction = "none"``)."""
    return gate.alpha_each(regression_headlines(gate, families))


def change_call(cell: Mapping[str, Any], check: str, tolerance: float, level: float) -> ChangeCall | None:
    """The judgement of ``check``'s headline in a baseline ``cell`` (``metrics.baseline``), None where the cell has
    no such change (no groups, no matched rows)."""
    metric, diff, se, test = HEADLINE[check]
    counts = cell.get(test) or {}
    if cell.get(diff) is None or not counts.get("n_pairs"):
        return None
    # McNemar's b: right (or steady) before and not now; for flips "now" is "flipped", so c is the worse way
    worse, better = (counts["b"], counts["c"]) if metric == "acc" else (counts["c"], counts["b"])
    return judge_change(metric, diff=cell[diff], se=cell.get(se), worse=worse, better=better,
                        n_rows=counts["n_pairs"], tolerance=tolerance, level=level)


def regression_results(family: str, cell: Mapping[str, Any], limits: Mapping[str, float],
                       level: float) -> list[CheckResult]:
    """One CheckResult per regression limit of ``family`` over all its datasets (``cell``: its baseline cell)."""
    out = []
    for check, tolerance in limits.items():
        call = change_call(cell, check, float(tolerance), level)
        if call is None:
            continue
        words = ("a regression beyond noise" if call.regression else "worse, within noise or the tolerance"
                 if call.diff * (1 if call.metric == "flip" else -1) > 0 else "not worse")
        detail = (f"{call.metric} change vs the baseline {call.diff:+.4f}, interval [{fmt(call.interval[0])}, "
                  f"{fmt(call.interval[1])}] at level {call.level:.3g} ({call.method}), McNemar p={call.p:.3g} "
                  f"(worse side {call.p_worse:.3g}), tolerance {fmt(float(tolerance))}: {words}")
        out.append(CheckResult(family, "all", check, not call.regression, call.diff, float(tolerance),
                               call.interval, detail, judge="paired"))
    return out


@dataclass(frozen=True)
class PairJudgement:
    """A pair of runs judged (``judge_pair``): the regression checks of each family over all its datasets at
    ``level`` (``alpha / headlines``), and each dataset's paired headlines (``calls``: (family, dataset, metric) ->
    ``ChangeCall``) at ``moves_level`` (``alpha / moves``), which say what moved beyond noise and never count as
    regressions."""

    alpha: float
    level: float
    headlines: int
    results: list[CheckResult]
    moves_level: float
    moves: int
    calls: dict[tuple[str, str, str], ChangeCall]

    @property
    def regressions(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]


def judge_pair(block: Mapping[str, Mapping[str, Mapping[str, Any]]], gate: Gate) -> PairJudgement:
    """NEW against OLD from their paired baseline block (``metrics.baseline.baseline_block``: ``{family: {dataset |
    "all": cell}}``) under ``gate`` (its alpha, correction and tolerances): what every path reports."""
    level = regression_level(gate, block)
    results = [r for family, cells in block.items() if cells.get(ALL)
               for r in regression_results(family, cells[ALL], regression_limits(gate, family, cells[ALL]), level)]
    paired = [(family, dataset, check) for family, cells in block.items() for dataset in cells if dataset != ALL
              for check in HEADLINE if change_call(cells[dataset], check, 0.0, 0.5) is not None]
    moves_level = gate.alpha_each(len(paired))
    calls = {(family, dataset, HEADLINE[check][0]): change_call(block[family][dataset], check, 0.0, moves_level)
             for family, dataset, check in paired}
    return PairJudgement(gate.alpha, level, regression_headlines(gate, block), results, moves_level, len(paired),
                         calls)


def gate_from(meta: Mapping[str, Any], where: str) -> Gate:
    """The ``[gate]`` a run was judged under, from its checks.json ``meta`` (``gate``; a folder written before it was
    recorded: the defaults, with its ``alpha``); ValueError naming ``where`` for values no limits file could give."""
    given = meta.get("gate")
    if given is None:
        return Gate(alpha=meta.get("alpha", Gate.alpha))
    if not isinstance(given, Mapping) or set(given) - set(Gate.__dataclass_fields__):
        raise ValueError(f"{where}: meta.gate is not the [gate] of a limits file: {str(given)[:200]}")
    gate = Gate(**given)
    tolerances = (gate.max_regression, gate.max_flip_regression)
    if not (isinstance(gate.alpha, (int, float)) and 0 < gate.alpha < 1) or gate.correction not in CORRECTIONS or \
            any(t is not None and not (isinstance(t, (int, float)) and 0 <= t <= 1) for t in tolerances):
        raise ValueError(f"{where}: meta.gate holds values no limits file gives: {str(given)[:200]}")
    return gate
