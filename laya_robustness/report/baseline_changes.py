"""Say in words how a summary changed against a baseline summary: verdicts, then numbers, worst first.

A number changed when it differs at the 3 decimals the reports show. Each change says whether the
new value lies outside the baseline's 95% interval of that metric (when the baseline has one).

>>> old = {"families": {"text": {"colour_choice": {"acc": 0.70, "acc_ci": [0.66, 0.73], "flip": 0.243}}}}
>>> new = {"families": {"text": {"colour_choice": {"acc": 0.62, "acc_ci": [0.58, 0.66], "flip": 0.281}}}}
>>> for line in summary_changes(new, old): print(line)
colour_choice text acc 0.700 -> 0.620, outside the previous interval [0.660, 0.730]
colour_choice text flip 0.243 -> 0.281 (no previous interval)
"""

from __future__ import annotations

from typing import Any, Mapping

from laya_robustness.report.cell_rows import CellVerdict, columns_of, number, summary_blocks


def _verdict_changes(verdicts, baseline_verdicts) -> list[str]:
    out = []
    for key in sorted(set(verdicts) | set(baseline_verdicts)):
        old, new = baseline_verdicts.get(key), verdicts.get(key)
        if old is None or new is None or old.outcome == new.outcome:
            continue
        out.append(f"{key[1]} {key[0]}: {old.short()} -> {new.short()}")
    return out


def _cell_changes(block: str, family: str, dataset: str, cell: Mapping, base: Mapping, keys) -> list[tuple]:
    """(sort key, sentence) per changed metric of one cell."""
    out = []
    for key in keys:
        old, new = base.get(key), cell.get(key)
        if old is None or new is None or number(old, key) == number(new, key):
            continue
        ci = base.get(f"{key}_ci")
        if ci:
            outside = not (ci[0] <= new <= ci[1])
            where = f", {'outside' if outside else 'inside'} the previous interval [{number(ci[0], key)}, " \
                    f"{number(ci[1], key)}]"
        else:
            outside, where = False, " (no previous interval)"
        sentence = f"{dataset} {family} {key} {number(old, key)} -> {number(new, key)}{where}"
        out.append(((not outside, -abs(new - old), dataset, family, key), sentence))
    return out


def summary_changes(summary: Mapping[str, Any], baseline: Mapping[str, Any],
                    verdicts: Mapping[tuple[str, str], CellVerdict] | None = None,
                    baseline_verdicts: Mapping[tuple[str, str], CellVerdict] | None = None,
                    limit: int | None = None) -> list[str]:
    """Changed verdicts, cells that appeared or went away, then changed numbers (outside the previous
    interval first, then by size of the change); at most ``limit`` lines plus one saying how many more."""
    lines = _verdict_changes(verdicts or {}, baseline_verdicts or {})
    numbers: list[tuple] = []
    for block in sorted(set(summary_blocks(summary)) | set(summary_blocks(baseline))):
        new_block, old_block = summary.get(block) or {}, baseline.get(block) or {}
        keys = columns_of(summary, block) or columns_of(baseline, block)
        for family in sorted(set(new_block) | set(old_block)):
            new_cells, old_cells = new_block.get(family) or {}, old_block.get(family) or {}
            for dataset in sorted(set(new_cells) | set(old_cells)):
                if dataset not in old_cells:
                    lines.append(f"{dataset} {family}: new (not in the baseline)")
                elif dataset not in new_cells:
                    lines.append(f"{dataset} {family}: in the baseline, not in this run")
                else:
                    numbers += _cell_changes(block, family, dataset, new_cells[dataset], old_cells[dataset], keys)
    lines += [sentence for _, sentence in sorted(numbers)]
    if not lines:
        return ["no change at the reported precision (3 d.p.)"]
    if limit is not None and len(lines) > limit:
        rest = len(lines) - limit
        lines = lines[:limit] + [f"... and {rest} more change{'s' if rest > 1 else ''}"]
    return lines

