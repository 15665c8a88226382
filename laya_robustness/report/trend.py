"""A model's robustness across checkpoints: the reports of several runs of the same rows (``checkpoint-<step>/``
folders, as ``training.RobustnessCallback`` writes them), per cell each headline number with its
interval, and each consecutive pair judged as ``--baseline`` and ``compare`` judge it (``gate.baseline_limits.judge_pair``,
under the later checkpoint's ``[gate]``): each dataset's change of accuracy (and of the flip rate of a
meaning-preserving family) on the same rows, with its interval at the pair's level (``*``: beyond noise), and each
family's regressions over all its datasets (``REGRESSION``), the ones the callback's ``stop_on_fail="regression"``
stops on.

Checkpoints whose configuration differs (rows, seed, rows per set, families, scoring, the model apart from its
weights: ``report.compare.configuration_differences``) are refused unless asked to be mixed; mixed, a cell's paired
change is shown only where both runs scored the very same rows, so its sign and star agree with the values. An
incomplete checkpoint (its summary's ``complete: false``) is marked, and a cell its scope did not judge shows no
value.

``trend_table`` is the plain-text table; ``trend_html`` puts a family's plots (one per metric and at most five
datasets, each value against the step with its interval as a band: ``report.plots.trend_figures``) above its rows
of the table (without matplotlib, the table alone).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from laya_robustness.gate.baseline_limits import PairJudgement, gate_from, judge_pair
from laya_robustness.report.html import visible
from laya_robustness.report.read_back import ReportFolder, read_folder
from laya_robustness.report.compare import configuration_differences
from laya_robustness.summary import headlines, summarize

@dataclass(frozen=True)
class Checkpoint:
    """One run's reports: its step (from a ``checkpoint-<step>`` folder name, else its position) and its report folder
    read back (``report.read_back.ReportFolder``)."""

    step: int
    report: ReportFolder

    @property
    def folder(self) -> Path:
        return self.report.folder

    @property
    def summary(self) -> dict:
        return self.report.summary

    @property
    def complete(self) -> bool:
        return self.summary.get("meta", {}).get("complete", True) is True

    @property
    def not_judged(self) -> set[tuple[str, str]]:
        """The (family, dataset) cells its scope asked for and did not judge (none for a complete run)."""
        if self.complete:
            return set()
        cells = self.summary.get("meta", {}).get("scope", {}).get("not_judged", {})
        return {(family, dataset) for family, datasets in cells.items() for dataset in datasets}

    @property
    def label(self) -> str:
        return f"step {self.step}" + ("" if self.complete else " (incomplete)")


def read_checkpoints(folders: Sequence[str | Path], mix: bool = False) -> list[Checkpoint]:
    """The checkpoints of ``folders`` in step order: sorted by step when every folder is a ``checkpoint-<step>``
    (so a shell's ``checkpoint-*``, which puts 10 before 9, is fine), else in the order given, numbered from 0. Each
    folder is read back as ``report.read_back.read_folder`` reads it (its errors); two folders of one step, or
    (unless ``mix``) two checkpoints whose configuration differs, are a ValueError naming them."""
    paths = [Path(f) for f in folders]
    steps = [re.fullmatch(r"checkpoint-(\d+)", p.resolve().name) for p in paths]
    if all(steps):
        order = sorted(range(len(paths)), key=lambda i: int(steps[i].group(1)))
        numbered = [(int(steps[i].group(1)), paths[i]) for i in order]
    else:
        numbered = list(enumerate(paths))
    out: list[Checkpoint] = []
    for step, folder in numbered:
        if out and step == out[-1].step:
            raise ValueError(f"{folder} and {out[-1].folder} are both step {step}")
        out.append(Checkpoint(step, read_folder(folder, checks=(Path(folder) / "checks.json").is_file())))
    for checkpoint in out[1:] if not mix else ():
        differ = configuration_differences(out[0].summary.get("meta", {}), checkpoint.summary.get("meta", {}))
        if differ:
            raise ValueError(f"{out[0].folder} (OLD) and {checkpoint.folder} (NEW) are not runs of one configuration: "
                             f"{'; '.join(differ)}; pass --mix to show them side by side anyway (paired changes "
                             "then only where both scored the same rows)")
    return out


def paired_changes(before: Checkpoint, after: Checkpoint) -> tuple[dict[tuple[str, str, str], dict], PairJudgement]:
    """``after`` judged against ``before`` (their predictions matched row by row: ``gate.baseline_limits.judge_pair``):
    (family, dataset, metric) -> the change ``{diff, ci, method, beyond_noise}`` of each cell both scored on the very
    same rows and judged, and the pair's judgement (its regressions)."""
    seed = int(after.summary.get("meta", {}).get("seed", 0))
    now, earlier = after.report.records, before.report.records
    block = summarize(now, seed=seed, baseline=earlier, cache=after.report.cache).get("baseline", {})
    judged = judge_pair(block, gate_from(after.report.checks_meta, f"{after.folder}/checks.json"))

    def rows(records) -> dict:
        out: dict = {}
        for r in records:
            out.setdefault((r["family"], r["dataset"]), set()).add(r["row_id"])
        return out

    then = rows(earlier)
    same = {cell for cell, ids in rows(now).items() if then.get(cell) == ids}  # the very same rows
    unjudged = before.not_judged | after.not_judged
    changes = {key: {"diff": call.diff, "ci": list(call.interval), "method": call.method, "beyond_noise": call.beyond}
               for key, call in judged.calls.items() if key[:2] in same and key[:2] not in unjudged}
    return changes, judged


def _families(values: Sequence[dict]) -> list[str]:
    """The families in the order the headlines hold them (declaration order: orig first)."""
    out: dict = {}
    for v in values:
        for family, _, _ in v:
            out.setdefault(family, None)
    return list(out)


def judged_pairs(checkpoints: Sequence[Checkpoint]) -> list[tuple[dict, PairJudgement]]:
    """``paired_changes`` of each consecutive pair of checkpoints."""
    return [paired_changes(a, b) for a, b in zip(checkpoints, checkpoints[1:])]


def regression_lines(checkpoints: Sequence[Checkpoint], pairs: Sequence[tuple[dict, PairJudgement]]) -> list[str]:
    """One line per regression of a checkpoint against the one before (each family over all its datasets), as
    ``compare`` and ``--baseline`` call it; the level each pair was judged at."""
    out = []
    for (_, judged), a, b in zip(pairs, checkpoints, checkpoints[1:]):
        out += [f"REGRESSION {a.label} -> {b.label}: {r.family} (all datasets) {r.check}: {r.detail}"
                for r in judged.regressions]
    if pairs:
        j = pairs[-1][1]
        out.append(f"(regressions judged at family-wise alpha {j.alpha:g} over each pair's family headlines, "
                   f"{j.level:.3g} each; * a dataset's change beyond noise at alpha {j.alpha:g} over its pair's "
                   f"dataset headlines, {j.moves_level:.3g} each)")
    return out


def trend_rows(checkpoints: Sequence[Checkpoint], pairs: Sequence[tuple[dict, PairJudgement]] | None = None
               ) -> list[dict]:
    """One row per (family, dataset, metric): its value and interval at each checkpoint, and the paired change
    from each checkpoint to the next (acc and flip; None for another metric or an unmatched cell)."""
    values = [{k: v for k, v in headlines(c.summary).items() if k[:2] not in c.not_judged} for c in checkpoints]
    changes = [change for change, _ in (judged_pairs(checkpoints) if pairs is None else pairs)]
    order = {family: i for i, family in enumerate(_families(values))}
    rows = []
    for family, dataset, metric in sorted({k for v in values for k in v}, key=lambda k: (order[k[0]], k[1], k[2])):
        pairs = [change.get((family, dataset, metric)) for change in changes]
        rows.append({"family": family, "dataset": dataset, "metric": metric,
                     "values": [v.get((family, dataset, metric)) for v in values], "changes": pairs})
    return rows


def _cell(value) -> str:
    if value is None:
        return "-"
    number, ci = value
    return f"{number:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _change(change) -> str:
    return f"{change['diff']:+.3f}{'*' if change['beyond_noise'] else ''}"


def trend_table(checkpoints: Sequence[Checkpoint], rows: Sequence[dict] | None = None) -> list[str]:
    """The trend as text: per cell and metric, each checkpoint's value [95% CI] and, after it, the paired change
    from the one before (``*``: its interval excludes 0); a name's control characters written out."""
    pairs = judged_pairs(checkpoints)
    rows = trend_rows(checkpoints, pairs) if rows is None else rows
    head = ["family", "dataset", "metric", *(c.label for c in checkpoints)]
    table = [head]
    for r in rows:
        cells = [_cell(r["values"][0])]
        for value, change in zip(r["values"][1:], r["changes"]):
            cells.append(_cell(value) + (f" ({_change(change)})" if change else ""))
        table.append([visible(r["family"]), visible(r["dataset"]), visible(r["metric"]), *cells])
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table]
    notes = ["(change): the paired change from the step before, on the same rows; * beyond noise"]
    if any(not c.complete for c in checkpoints):
        notes.append("(incomplete): a run that did not judge every cell it asked for; a cell it did not judge shows -")
    return lines + [visible(line) for line in regression_lines(checkpoints, pairs)] + notes


def _plots(rows: Sequence[dict], steps: Sequence[int], family: str) -> list[tuple[str, str]]:
    """``family``'s plots as ``(title, base64 PNG)`` (``report.plots.trend_figures``); none without matplotlib."""
    try:
        from laya_robustness.report.plots import png_base64, trend_figures

        return [(title, png_base64(fig)) for title, fig in trend_figures(rows, steps, family)]
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        return []


def trend_html(checkpoints: Sequence[Checkpoint]) -> str:
    """The trend page: per family its plots (a metric each, the step on x) above its rows of the table."""
    pairs = judged_pairs(checkpoints)
    rows = trend_rows(checkpoints, pairs)
    steps = [c.step for c in checkpoints]
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>robustness across checkpoints</title>",
             "<style>body{font-family:sans-serif;margin:8px} .plots{display:flex;flex-wrap:wrap;gap:8px} "
             ".plots img{width:620px;max-width:100%;height:auto} .table{overflow-x:auto;max-width:100%;"
             "margin:0.5em 0 1.5em} table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;"
             "padding:2px 6px;white-space:nowrap} .noise{font-weight:bold;color:#b00}</style></head><body>",
             f"<h1>Robustness across {len(checkpoints)} checkpoints</h1>",
             "<p>Plots: each dataset's value at each checkpoint step, its 95% interval as a band. (change): the "
             "paired change from the step before, on the same rows; in bold red: beyond noise.</p>",
             *(f"<p>{html.escape(visible(line))}</p>" for line in regression_lines(checkpoints, pairs))]
    head = "".join(f"<th>{html.escape(c.label)}</th>" for c in checkpoints)
    for family in _families([headlines(c.summary) for c in checkpoints]):
        mine = [r for r in rows if r["family"] == family]
        body = []
        for r in mine:
            cells = [f"<td>{_cell(r['values'][0])}</td>"]
            for value, change in zip(r["values"][1:], r["changes"]):
                style = " class='noise'" if change and change["beyond_noise"] else ""
                cells.append(f"<td>{_cell(value)}" + (f" <span{style}>({_change(change)})</span>" if change else "")
                             + "</td>")
            body.append(f"<tr><td>{html.escape(r['dataset'])}</td><td>{html.escape(r['metric'])}</td>"
                        f"{''.join(cells)}</tr>")
        plots = "".join(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{image}'>"
                        for title, image in _plots(mine, steps, family))
        parts.append(f"<section class='family'><h2>{html.escape(family)}</h2>"
                     + (f"<div class='plots'>{plots}</div>" if plots else "")
                     + f"<div class='table'><table><tr><th>dataset</th><th>metric</th>{head}</tr>{''.join(body)}"
                     "</table></div></section>")
    return "".join(parts) + "</body></html>\n"
