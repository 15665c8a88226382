"""Two runs' reports compared for review (``python -m laya_robustness compare OLD NEW``): whether they can be
compared, what moved beyond noise, which checks changed verdict, and a one-line verdict, as text or markdown (a pull
request comment).

Comparable: the same rows (the data fingerprint), seed, rows per set, families and scoring (path, precision, batch
size, temperatures), and the same model configuration apart from its weights (architecture, adapter, answer format,
chat template, attention); each difference is named, and the status is 4.

Whether NEW regressed is the one judgement every path makes (``gate.baseline_limits.judge_pair``, as the gate's
``--baseline`` checks, ``trend`` and the training callback's ``stop_on_fail="regression"`` make it): each family's
accuracy, and a meaning-preserving family's flip rate, over all its datasets, paired on the rows both runs scored,
McNemar's exact test and an interval that agrees with it, at family-wise ``alpha`` over those headlines
(``[gate]`` of NEW's checks.json: alpha, correction, ``max_regression`` / ``max_flip_regression`` as the
tolerance). A check that passed and now fails is a regression too.

Each dataset's headlines move old -> new against the old 95% interval: accuracy and flip rate by the same paired
judgement at family-wise ``alpha`` over every such headline (beyond noise, either way); another headline has no
paired test (beyond noise when the new value lies outside the old interval). These moves say where things changed;
they never count as regressions. Moves are ordered beyond noise first, each group furthest first in half-widths of
the old interval (``|new - old| / ((high - low) / 2)``).

The status is the gate's: 0 no regression, 1 a regression, 4 not comparable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from laya_robustness.gate.baseline_limits import PairJudgement, gate_from, judge_pair
from laya_robustness.gate.results import CheckResult
from laya_robustness.report.html import visible
from laya_robustness.report.markdown import md
from laya_robustness.report.read_back import ReportFolder, read_folder
from laya_robustness.summary import headlines, summarize

PASSED, REGRESSED, NOT_COMPARABLE = 0, 1, 4
FAIL = "fail"  # a check's decision in checks.json
#: The meta keys two comparable runs share, and the model identity's keys that are not its weights.
SAME_META = ("data_fingerprint", "seed", "rows_per_set", "families", "scoring_path", "precision", "batch_size",
             "temperatures")
#: (A planted regression, ``scoring.planted``, stands for changed weights: ``calibrate-gate`` measures the judgement
#: with it.)
NOT_CONFIGURATION = ("model", "weights_sha256", "dual", "prefix_sharing", "planted")


#: One run's report folder: its summary.json, checks.json (its results) and predictions.
Report = ReportFolder


@dataclass(frozen=True)
class Move:
    """One dataset's headline that moved: old -> new, the old interval, the paired judgement where one applies
    (``metrics.regression.ChangeCall``), and whether it moved beyond noise."""

    cell: str
    metric: str
    old: float
    new: float
    interval: list | None
    paired: object | None
    beyond: bool

    @property
    def half_widths(self) -> float:
        return half_widths(self.old, self.new, self.interval) if self.interval else 0.0


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found: the two folders, why they cannot be compared (empty when they can), the pair's
    judgement (``judged``: its regression checks and level), the moved headlines in order, the checks that changed
    verdict, and the status (see the module doc)."""

    old: Path
    new: Path
    not_comparable: list[str] = field(default_factory=list)
    judged: PairJudgement | None = None
    moves: list[Move] = field(default_factory=list)
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (check, old decision, new decision)

    @property
    def regressed(self) -> list[CheckResult]:
        """The regression checks that failed (each family over all its datasets)."""
        return self.judged.regressions if self.judged else []

    @property
    def now_failing(self) -> list[tuple[str, str, str]]:
        """The checks that did not fail in OLD and fail in NEW."""
        return [v for v in self.verdicts if v[2] == FAIL and v[1] != FAIL]

    @property
    def regressions(self) -> int:
        return len(self.regressed) + len(self.now_failing)

    @property
    def status(self) -> int:
        if self.not_comparable:
            return NOT_COMPARABLE
        return REGRESSED if self.regressions else PASSED

    def level(self) -> str:
        """How the regressions were judged, in one sentence."""
        j = self.judged
        return (f"regressions judged at family-wise alpha {j.alpha:g} over {j.headlines} family headline(s) "
                f"({j.level:.3g} each); moves at alpha {j.alpha:g} over {j.moves} dataset headline(s) "
                f"({j.moves_level:.3g} each); McNemar's exact test, with an interval that agrees with it")

    def verdict(self) -> str:
        if self.not_comparable:
            return f"NOT COMPARABLE (exit 4): {'; '.join(self.not_comparable)}"
        beyond = sum(m.beyond for m in self.moves)
        if self.regressions:
            return (f"REGRESSED (exit 1): {self.regressions} regression(s) beyond noise; {beyond} dataset "
                    "headline(s) moved beyond noise")
        return f"PASSED (exit 0): no regression beyond noise; {beyond} dataset headline(s) moved beyond noise"


def half_widths(old: float, new: float, interval) -> float:
    """How far ``old`` -> ``new`` moved in half-widths of ``old``'s interval: ``|new - old| / ((high - low) / 2)``
    (infinite for an interval of no width)."""
    half = (interval[1] - interval[0]) / 2
    return abs(new - old) / half if half > 0 else math.inf


def read_report(folder: str | Path) -> Report:
    """The report in ``folder`` (summary.json, checks.json, predictions.jsonl.gz), each file checked and the summary
    against the predictions (``report.read_back.read_folder``): FileNotFoundError naming what is missing, ValueError
    naming a file that is not the gate's."""
    return read_folder(folder, checks=True)


def _configuration(meta: dict) -> dict:
    identity = meta.get("model") or {}
    return {k: v for k, v in identity.items() if k not in NOT_CONFIGURATION}


def configuration_differences(old: dict, new: dict) -> list[str]:
    """What makes two runs' meta blocks not comparable (rows, seed, rows per set, families, scoring, the model's
    configuration apart from its weights), each named with both values."""
    out = [f"{key} differs ({old.get(key)!r} in OLD, {new.get(key)!r} in NEW)"
           for key in SAME_META if old.get(key) != new.get(key)]
    old_model, new_model = _configuration(old), _configuration(new)
    return out + [f"the model's {key} differs ({old_model.get(key)!r} in OLD, {new_model.get(key)!r} in NEW)"
                  for key in sorted(set(old_model) | set(new_model)) if old_model.get(key) != new_model.get(key)]


def differences(old: dict, new: dict) -> list[str]:
    """``configuration_differences``, and a run of the two that is incomplete (its unjudged cells hold no verdict
    to compare)."""
    return configuration_differences(old, new) + [
        f"{name} is an incomplete run ({meta.get('incomplete_reason', 'no reason given')})"
        for name, meta in (("OLD", old), ("NEW", new)) if meta.get("complete", True) is not True]


def verdict(result: dict) -> str | None:
    """A check's verdict as the gate counts it: a known limitation's failure is "expected" (xfail: it does not make
    the run fail) and its pass "xpass"; any other check's its decision.

    >>> verdict({"decision": "fail", "known": True}), verdict({"decision": "fail", "known": False})
    ('expected', 'fail')
    """
    decision = result.get("decision")
    if result.get("known") and decision in (FAIL, "pass"):
        return "expected" if decision == FAIL else "xpass"
    return decision


def verdict_changes(old: list, new: list) -> list[tuple[str, str, str]]:
    """The checks both runs judged whose verdict (``verdict``) changed: (family/dataset check, old, new)."""
    def keyed(results):
        return {(r.get("device"), r["family"], r["dataset"], r["check"]): verdict(r) for r in results}

    before, after = keyed(old), keyed(new)
    return [(f"{k[1]}/{k[2]} {k[3]}", before[k], after[k]) for k in sorted(set(before) & set(after))
            if before[k] != after[k]]


def compare(old: Report, new: Report) -> Comparison:
    """The two runs compared (see the module doc)."""
    meta_old, meta_new = old.summary.get("meta", {}), new.summary.get("meta", {})
    why = differences(meta_old, meta_new)
    if why:
        return Comparison(old.folder, new.folder, why)
    seed = int(meta_new.get("seed", 0))
    block = summarize(new.records, seed=seed, baseline=old.records, cache=new.cache).get("baseline", {})
    judged = judge_pair(block, gate_from(new.checks_meta, f"{new.folder}/checks.json"))
    before, after = headlines(old.summary), headlines(new.summary)
    moves = []
    for key in sorted(set(before) & set(after)):
        family, dataset, metric = key
        (was, interval), (now, _) = before[key], after[key]
        if round(was, 3) == round(now, 3):
            continue
        call = judged.calls.get(key)
        beyond = call.beyond if call is not None else bool(interval) and not interval[0] <= now <= interval[1]
        moves.append(Move(f"{family}/{dataset}", metric, was, now, interval, call, beyond))
    moves.sort(key=lambda m: (not m.beyond, -m.half_widths, m.cell, m.metric))
    return Comparison(old.folder, new.folder, [], judged, moves, verdict_changes(old.results, new.results))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value + 0.0:.3f}"


def _interval(interval) -> str:
    return f" [{_number(interval[0])}, {_number(interval[1])}]" if interval else ""


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _paired_text(move: Move) -> str:
    call = move.paired
    if call is None:
        return "no paired test (outside the old 95% interval)" if move.beyond else "no paired test"
    return f"paired {call.diff:+.3f}{_interval(call.interval)} ({call.method}), McNemar {_p(call.p)}"


def _regression_text(r: CheckResult) -> str:
    """One regression check that failed, in words: the family, its headline's change and interval, the test."""
    return f"{r.family} (all datasets) {r.check}: {r.detail}"


def text_lines(comparison: Comparison) -> list[str]:
    """The comparison for a terminal: the regressions, what moved beyond noise, the checks that changed verdict, the
    level they were judged at and the verdict last; the control characters of a name written out
    (``report.html.visible``)."""
    c = comparison
    lines = [f"compare {c.old} (OLD) -> {c.new} (NEW)"]
    if not c.not_comparable:
        lines += [f"  REGRESSION {_regression_text(r)}" for r in c.regressed]
        lines += [f"  REGRESSION check {name}: {old} -> {new}" for name, old, new in c.now_failing]
        lines += [f"  {m.cell} {m.metric}: {_number(m.old)} -> {_number(m.new)} (old interval{_interval(m.interval)}; "
                  f"{_paired_text(m)})" for m in c.moves if m.beyond]
        within = sum(not m.beyond for m in c.moves)
        if within:
            lines.append(f"  {within} other headline(s) moved within noise")
        lines += [f"  check {name}: {old} -> {new}" for name, old, new in c.verdicts if (name, old, new)
                  not in c.now_failing]
        lines.append(f"  ({c.level()})")
    return [visible(line) for line in [*lines, c.verdict()]]


def _folded(summary: str, lines: list[str]) -> list[str]:
    """``lines`` folded under ``summary`` (a ``<details>`` block GitHub opens on a click); nothing when empty."""
    return ["", f"<details><summary>{summary}</summary>", "", *lines, "", "</details>"] if lines else []


def markdown(comparison: Comparison) -> str:
    """The comparison as a pull request comment: the verdict and the level it was judged at, the regressions, then
    folded the headlines that moved beyond noise and the other verdict changes; every text from the reports through
    ``report.markdown.md``."""
    c = comparison
    out = ["## Robustness gate: NEW against OLD", "", f"**{md(c.verdict())}**", "",
           f"OLD: {md(c.old)}; NEW: {md(c.new)}", ""]
    if c.not_comparable:
        out += [f"- {md(why)}" for why in c.not_comparable]
        return "\n".join(out) + "\n"
    out += [f"Judged as the gate judges `--baseline`: {md(c.level())}.", ""]
    if c.regressed or c.now_failing:
        out += ["### Regressions", ""]
        out += [f"- **{md(r.family)}** (all datasets) {md(r.check)}: {md(r.detail)}" for r in c.regressed]
        out += [f"- check {md(name)}: {md(old)} -> **fail**" for name, old, _ in c.now_failing]
    beyond = [m for m in c.moves if m.beyond]
    table = ["| cell | headline | OLD [95% interval] | NEW | paired change |", "| --- | --- | --- | --- | --- |"]
    table += [f"| {md(m.cell)} | {md(m.metric)} | {_number(m.old)}{_interval(m.interval)} | {_number(m.new)} | "
              f"{md(_paired_text(m))} |" for m in beyond]
    out += _folded(f"{len(beyond)} dataset headline(s) moved beyond noise (never a regression on their own)",
                   table if beyond else [])
    others = [f"- {md(name)}: {md(old)} -> {md(new)}" for name, old, new in c.verdicts
              if (name, old, new) not in c.now_failing]
    out += _folded(f"{len(others)} other check(s) changed verdict", others)
    out += ["", f"{sum(not m.beyond for m in c.moves)} headline(s) moved within noise."]
    return "\n".join(out) + "\n"
