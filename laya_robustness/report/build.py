"""Gather what the reports show from one run (summary, records, check results, source rows) into a Report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.report.cell_rows import CellVerdict, Known, cell_verdicts
from laya_robustness.report.curves import Reliability, StrengthCurve, reliability, strength_curves
from laya_robustness.report.examples import Example, rebuild_rows, select_examples


@dataclass
class Report:
    """Everything report.html and summary.md render; ``notes`` says what is missing and why."""

    summary: Mapping[str, Any]
    verdicts: Mapping[tuple[str, str], CellVerdict]
    examples: Mapping[str, Sequence[Example]]
    rows: Mapping[str, Any]  # row_id -> rebuilt Row of every shown record ({} without the data)
    reliability: Sequence[Reliability]
    strength: Sequence[StrengthCurve]
    invariance: Mapping[str, Any] | None = None  # invariance.json
    baseline: Mapping[str, Any] | None = None  # the baseline's summary.json
    notes: list[str] = field(default_factory=list)


def build_report(
    summary: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    results: Iterable[Any] | None = None,
    known: Known | None = None,
    invariance: Mapping[str, Any] | None = None,
    source_rows: Mapping[str, Sequence[Any]] | None = None,
    baseline: Mapping[str, Any] | None = None,
    per_family: int = 5,
    per_group: int = 3,
) -> Report:
    """A Report of one run.

    ``results``: the check results of the run (``checks.CheckResult`` or their dict form), None when
    no limits were checked; ``known(family, dataset, check)``: a declared known limitation's reason.
    ``source_rows``: the run's sampled source rows by dataset (``run.load_source_rows``), from which
    the shown rows and their images are rebuilt with the summary's seed; None shows no images.
    """
    notes = []
    meta = summary.get("meta") or {}
    if meta.get("complete") is False:
        notes.append(f"this run is incomplete: {meta.get('incomplete_reason', 'no reason given')}")
    verdicts = cell_verdicts(results or [], known or (lambda family, dataset, check: None))
    if results is None:
        notes.append("no limits were checked: the verdict columns are empty")
    examples = select_examples(records, per_family=per_family, per_group=per_group)
    rows: Mapping[str, Any] = {}
    if source_rows is None:
        notes.append("the rows were not rebuilt (no data given): the examples show no images")
    else:
        seed = summary.get("meta", {}).get("seed", summary.get("bootstrap", {}).get("seed", 0))
        rows = rebuild_rows(examples, source_rows, seed)
    return Report(summary, verdicts, examples, rows, reliability(records), strength_curves(records),
                  invariance, baseline, notes)
