"""Explain a failed check: a message naming family, dataset, metric, value, limit, interval and detail, and the
groups that contribute most to it."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.gate import worst
from laya_robustness.gate.catalogue import CATALOGUE, CHECKS, unknown, wording
from laya_robustness.gate.results import CheckResult, fmt


def failure_message(result: CheckResult, worst_lines: Sequence[str]) -> str:
    """A multi-line message: family, dataset, metric, value, limit, interval, detail and the worst groups."""
    metric, rule = wording(result.check)
    level = "at the pair's level (detail)" if result.judge == "paired" else "95%"  # gate.baseline_limits's judgement
    interval = "none" if result.interval is None else f"{level} [{fmt(result.interval[0])}, {fmt(result.interval[1])}]"
    lines = [
        f"{result.family}/{result.dataset}: {result.check} {'passed' if result.passed else 'FAILED'}",
        f"  family:   {result.family}",
        f"  dataset:  {result.dataset}",
        f"  metric:   {metric} = {fmt(result.value)}",
        f"  limit:    {result.check} = {fmt(result.limit)} (passes when {rule.format(limit=fmt(result.limit))})",
        f"  interval: {interval}",
        f"  detail:   {result.detail}",
        f"  worst ({len(worst_lines)}):" if worst_lines else "  worst:    (none given)",
    ]
    lines += [f"    {line}" for line in worst_lines]
    return "\n".join(lines)


def worst_groups(records: Iterable[Mapping[str, Any]], family: str, dataset: str, check: str, n: int = 5) -> list[str]:
    """Up to ``n`` ready-made lines naming what contributes most to a failure of ``check`` on the cell.

    max_flip: groups by flip rate; max_asr: by the share of variants pulled to the target; max_drop: by accuracy
    loss vs orig; min_acc: by accuracy, lowest first; min_gap: groups still right under the control; max_ece:
    wrong rows by confidence (each check's ranker is declared in ``laya_robustness.gate.catalogue``). Only
    contributing groups are listed; ties are broken by group_id (then row_id). No row of (family, dataset), or
    no orig row where the rule needs one, raises ValueError.
    """
    if check not in CATALOGUE:
        raise ValueError(unknown("check", check, CHECKS))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    records = worst.checked(records)
    rows = [r for r in records if r["dataset"] == dataset and r["family"] == family]
    if not rows:
        raise ValueError(f"no records of family {family!r} on dataset {dataset!r}")
    ranked = CATALOGUE[check].worst(worst.by_group(rows), worst.orig_rows(records, dataset), family, dataset)
    return [item[-1] for item in sorted(ranked, key=lambda item: item[:-1])[:n]]
