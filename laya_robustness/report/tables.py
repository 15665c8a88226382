"""Plain-text tables of a summary: the flat accuracy table, ECE by family, injection and the ECE floor.

Which families appear, in which order and under which headers comes from their declarations
(``laya_robustness.families``): ``title`` / ``short`` name the columns, ``table`` the statistics.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from laya_robustness.families import FLAT, families_in
from laya_robustness.records import ORIG
from laya_robustness.report.cell_rows import probability_lines

FLOOR_MARK = "*"


def _num(value: float | None, key: str = "acc") -> str:
    """3 d.p.; deltas signed; None as "-"."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if key == "delta" else f"{value:.3f}"


def _stats(cell: Mapping[str, Any] | None, keys: Sequence[str]) -> str:
    return "-" if cell is None else " / ".join(_num(cell.get(k), k) for k in keys)


def _orig_acc(cell: Mapping[str, Any] | None) -> str:
    if cell is None or cell.get("acc") is None:
        return "-"
    ci = cell.get("acc_ci")
    return _num(cell["acc"]) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _mean_stats(cells: Sequence[Mapping[str, Any] | None], keys: Sequence[str]) -> str:
    """Per statistic, the mean over datasets; "-" unless every dataset has it."""
    if all(c is None for c in cells):
        return "-"
    parts = []
    for k in keys:
        values = [None if c is None else c.get(k) for c in cells]
        parts.append("-" if None in values else _num(sum(values) / len(values), k))
    return " / ".join(parts)


def render(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def _datasets(summary: Mapping[str, Any]) -> list[str]:
    return sorted({d for cells in summary[FLAT].values() for d in cells})


def _perturbation_columns():
    """(family, header, statistics) of the flat families other than orig, in declaration order."""
    return [(f.name, f"{f.title}: {' / '.join(f.table)}", f.table) for f in families_in(FLAT) if f.name != ORIG]


def _accuracy_table(summary: Mapping[str, Any]) -> str:
    fams, datasets, columns = summary[FLAT], _datasets(summary), _perturbation_columns()
    rows = [["dataset", "orig acc [95% CI]"] + [h for _, h, _ in columns] + ["chance / majority"]]
    for d in datasets:
        orig = fams.get(ORIG, {}).get(d)
        cols = [_stats(fams.get(f, {}).get(d), keys) for f, _, keys in columns]
        rows.append([d, _orig_acc(orig), *cols, _stats(orig, ("chance", "majority"))])
    mean = [_mean_stats([fams.get(f, {}).get(d) for d in datasets], keys) for f, _, keys in columns]
    orig_mean = _mean_stats([fams.get(ORIG, {}).get(d) for d in datasets], ("acc",))
    rows.append([f"mean of {len(datasets)}", orig_mean, *mean, ""])
    return render(rows)


def _ece_table(summary: Mapping[str, Any]) -> str:
    fams, columns = summary[FLAT], [(f.name, f.short) for f in families_in(FLAT)]
    rows = [["dataset"] + [h for _, h in columns]]
    for d in _datasets(summary):
        rows.append([d] + [_stats(fams.get(f, {}).get(d), ("ece",)) for f, _ in columns])
    return render(rows)


def _rate(value: float | None) -> str:
    """2 d.p. as in the reference's injection table; None as "-"."""
    return "-" if value is None else f"{value:.2f}"


def format_injection_table(summary: Mapping[str, Any]) -> str:
    """Per dataset: orig acc, then per injection family its acc and the ASR of each variant.

    Accuracies at 3 d.p., ASRs at 2; an absent cell or variant shows "-".
    """
    block = summary.get("injection") or {}
    if not block:
        return "no injection families"
    orig = summary.get(FLAT, {}).get(ORIG, {})
    families = families_in("injection")
    header = ["dataset", "orig acc"]
    for f in families:
        labels = " / ".join(f.variant_labels.get(v, v) for v in f.variants)
        header += [f"{f.name} acc", f"{f.title} ASR ({labels})"]
    rows = [header]
    for d in sorted({d for cells in block.values() for d in cells}):
        row = [d, _stats(orig.get(d), ("acc",))]
        for f in families:
            cell = block.get(f.name, {}).get(d)
            asrs = "-" if cell is None else " / ".join(
                _rate(cell.get("variants", {}).get(v, {}).get("asr")) for v in f.variants)
            row += [_stats(cell, ("acc",)), asrs]
        rows.append(row)
    return render(rows)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_floor_table(summary: Mapping[str, Any]) -> str:
    """Per dataset and family (orig first): ECE, floor mean, floor p95, clustered p95, ECE / floor.

    An ECE above both p95s (beyond sampling noise for a calibrated model) is marked with "*".
    """
    block = summary.get("floor") or {}
    if not block:
        return "no ECE floor (summarize with ece_floor_sims > 0)"
    rows = [["dataset", "family", "ECE", "floor mean", "floor p95", "clustered p95", "ECE / floor"]]
    cells = sorted((d, f != ORIG, f) for f, by_dataset in block.items() for d in by_dataset)
    for d, _, f in cells:
        c = block[f][d]
        if c.get("probabilities"):  # a generation-only scorer: no confidence to redraw from
            rows.append([d, f, f"n/a: {c['probabilities']}", "-", "-", "-", "-"])
            continue
        mark = FLOOR_MARK if c["ece"] > c["floor_p95"] and c["ece"] > c["clustered_p95"] else ""
        numbers = [_num(c[k]) for k in ("floor_mean", "floor_p95", "clustered_p95")]
        rows.append([d, f, _num(c["ece"]) + mark, *numbers, _ratio(c["ratio"])])
    return render(rows) + f"\n{FLOOR_MARK} ECE above both p95s: miscalibrated beyond sampling noise"


def format_table(summary: Mapping[str, Any]) -> str:
    """The flat accuracy table (one row per dataset plus the mean) and the ECE-by-family table,
    then the injection table and the ECE floor table when the summary has those blocks.

    An absent family or statistic shows "-"; the mean row is the plain mean over datasets.
    """
    parts = []
    if summary.get(FLAT):
        parts.append("Accuracy [95% CI], paired delta vs orig, flip rate\n" + _accuracy_table(summary))
        unavailable = probability_lines(summary)
        parts.append("\n".join(unavailable) if unavailable else
                     "ECE by family (point estimates)\n" + _ece_table(summary))
    if summary.get("injection"):
        parts.append("Injection: accuracy and attack success rate (ASR)\n" + format_injection_table(summary))
    if summary.get("floor"):
        parts.append("ECE noise floor (calibrated redraws)\n" + format_floor_table(summary))
    return "\n\n".join(parts) if parts else "no predictions"
