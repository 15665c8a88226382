"""Two runs' reports compared for review (``python -m laya_robustness compare OLD NEW``): whether they can be
compared, what moved beyond noise, which checks changed verdict, and a one-line verdict, as text or markdown (a pull
request comment).

Comparable: the same rows (the data fingerprint), seed, rows per set, families and scoring (path, precision, batch
size, temperatures), and the same model configuration apart from its weights (architecture, adapter, answer format,
chat template, attention); each difference is named, and the status is 4.

Each headline of a cell both runs hold moves old -> new against the old 95% interval. For accuracy, and the flip
rate of a meaning-preserving family, the paired test on the rows both runs scored decides (``metrics.baseline``:
``acc_diff`` / ``flip_diff`` with their paired cluster-bootstrap 95% interval, McNemar's p): beyond noise when that
interval excludes 0. Another headline has no paired test: beyond noise when the new value lies outside the old
interval. Moves are ordered regressions first, then the others beyond noise, then those within, each group furthest
first in half-widths of the old interval (``|new - old| / ((high - low) / 2)``).

A regression beyond noise is an accuracy down or a flip rate up beyond noise, or a check that passed and now fails.
The status is the gate's: 0 no regression beyond noise, 1 a regression beyond noise, 4 not comparable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from laya_robustness.metrics.baseline import ALL
from laya_robustness.report.html import visible
from laya_robustness.report.markdown import md
from laya_robustness.report.read_back import ReportFolder, read_folder
from laya_robustness.summary import headlines, summarize

PASSED, REGRESSED, NOT_COMPARABLE = 0, 1, 4
FAIL = "fail"  # a check's decision in checks.json
#: The meta keys two comparable runs share, and the model identity's keys that are not its weights.
SAME_META = ("data_fingerprint", "seed", "rows_per_set", "families", "scoring_path", "precision", "batch_size",
             "temperatures")
NOT_CONFIGURATION = ("model", "weights_sha256", "dual", "prefix_sharing")
#: The headlines a paired test judges, the change it reads, and which way is worse.
PAIRED = {"acc": ("acc_diff", -1), "flip": ("flip_diff", +1)}


#: One run's report folder: its summary.json, checks.json (its results) and predictions.
Report = ReportFolder


@dataclass(frozen=True)
class Move:
    """One headline that moved: old -> new, the old interval, the paired change where one applies, whether it is
    beyond noise, and whether it is a regression beyond noise."""

    cell: str
    metric: str
    old: float
    new: float
    interval: list | None
    paired: dict | None
    beyond: bool
    regression: bool

    @property
    def half_widths(self) -> float:
        return half_widths(self.old, self.new, self.interval) if self.interval else 0.0


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found: the two folders, why they cannot be compared (empty when they can), the moved
    headlines in order, the checks that changed verdict, and the status (see the module doc)."""

    old: Path
    new: Path
    not_comparable: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (check, old decision, new decision)

    @property
    def regressions(self) -> int:
        return sum(m.regression for m in self.moves) + sum(new == FAIL and old != FAIL for _, old, new in self.verdicts)

    @property
    def status(self) -> int:
        if self.not_comparable:
            return NOT_COMPARABLE
        return REGRESSED if self.regressions else PASSED

    def verdict(self) -> str:
        if self.not_comparable:
            return f"NOT COMPARABLE (exit 4): {'; '.join(self.not_comparable)}"
        beyond = sum(m.beyond for m in self.moves)
        if self.regressions:
            return (f"REGRESSED (exit 1): {self.regressions} regression(s) beyond noise; {beyond} headline(s) moved "
                    "beyond noise")
        return f"PASSED (exit 0): no regression beyond noise; {beyond} headline(s) moved beyond noise"


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


def verdict_changes(old: list, new: list) -> list[tuple[str, str, str]]:
    """The checks both runs judged whose verdict changed: (family/dataset check, old, new)."""
    def keyed(results):
        return {(r.get("device"), r["family"], r["dataset"], r["check"]): r.get("decision") for r in results}

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
    paired = summarize(new.records, seed=seed, baseline=old.records, cache=new.cache).get("baseline", {})
    before, after = headlines(old.summary), headlines(new.summary)
    moves = []
    for key in sorted(set(before) & set(after)):
        family, dataset, metric = key
        (was, interval), (now, _) = before[key], after[key]
        if round(was, 3) == round(now, 3):
            continue
        cell = paired.get(family, {}).get(dataset) if dataset != ALL else None
        change, worse = PAIRED.get(metric, (None, 0))
        test = None
        if cell is not None and change and cell.get(change) is not None:
            test = {"diff": cell[change], "ci": cell.get(f"{change}_ci"),
                    "p": (cell.get("mcnemar_acc" if metric == "acc" else "mcnemar_flip") or {}).get("p")}
        if test is not None and test["ci"]:
            low, high = test["ci"]
            beyond = low > 0 or high < 0
            regression = beyond and test["diff"] * worse > 0
        else:
            beyond = bool(interval) and not interval[0] <= now <= interval[1]
            regression = False
        moves.append(Move(f"{family}/{dataset}", metric, was, now, interval, test, beyond, regression))
    moves.sort(key=lambda m: (not m.regression, not m.beyond, -m.half_widths, m.cell, m.metric))
    return Comparison(old.folder, new.folder, [], moves, verdict_changes(old.results, new.results))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value + 0.0:.3f}"


def _interval(interval) -> str:
    return f" [{_number(interval[0])}, {_number(interval[1])}]" if interval else ""


def _paired_text(move: Move) -> str:
    if move.paired is None:
        return "no paired test"
    p = move.paired.get("p")
    shown = "" if p is None else ", McNemar p<0.001" if p < 0.001 else f", McNemar p={p:.3f}"
    return f"paired {move.paired['diff']:+.3f}{_interval(move.paired['ci'])}{shown}"


def text_lines(comparison: Comparison) -> list[str]:
    """The comparison for a terminal: what moved beyond noise, the checks that changed verdict, the verdict last; the
    control characters of a name written out (``report.html.visible``)."""
    c = comparison
    lines = [f"compare {c.old} (OLD) -> {c.new} (NEW)"]
    if not c.not_comparable:
        for m in c.moves:
            if m.beyond:
                mark = "REGRESSION " if m.regression else ""
                lines.append(f"  {mark}{m.cell} {m.metric}: {_number(m.old)} -> {_number(m.new)} (old interval"
                             f"{_interval(m.interval)}; {_paired_text(m)})")
        within = sum(not m.beyond for m in c.moves)
        if within:
            lines.append(f"  {within} other headline(s) moved within noise")
        lines += [f"  check {name}: {old} -> {new}" for name, old, new in c.verdicts]
    return [visible(line) for line in [*lines, c.verdict()]]


def markdown(comparison: Comparison) -> str:
    """The comparison as a pull request comment: the verdict, a table of the headlines beyond noise, the checks
    that changed verdict; every text from the reports through ``report.markdown.md``."""
    c = comparison
    out = ["## Robustness gate: NEW against OLD", "", f"**{md(c.verdict())}**", "",
           f"OLD: {md(c.old)}; NEW: {md(c.new)}", ""]
    if c.not_comparable:
        out += [f"- {md(why)}" for why in c.not_comparable]
        return "\n".join(out) + "\n"
    beyond = [m for m in c.moves if m.beyond]
    if beyond:
        out += ["| cell | headline | OLD [95% interval] | NEW | paired change | |", "| --- | --- | --- | --- | --- | --- |"]
        out += [f"| {md(m.cell)} | {md(m.metric)} | {_number(m.old)}{_interval(m.interval)} | {_number(m.new)} | "
                f"{_paired_text(m)} | {'**regression**' if m.regression else 'beyond noise'} |" for m in beyond]
        out.append("")
    within = sum(not m.beyond for m in c.moves)
    out.append(f"{len(beyond)} headline(s) moved beyond noise, {within} within noise.")
    if c.verdicts:
        out += ["", "### Checks that changed verdict", ""]
        out += [f"- {md(name)}: {md(old)} -> {'**fail**' if new == FAIL else md(new)}" for name, old, new in c.verdicts]
    return "\n".join(out) + "\n"
