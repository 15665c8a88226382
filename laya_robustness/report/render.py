"""Render report.html and summary.md: from a run's summary and records (``write_report``, which the gate calls
after writing summary.json), or offline from a predictions file and the summary.json and invariance.json
beside it (``render_files``: ``python -m laya_robustness report``), recomputing the verdicts from the limits
files and rebuilding the shown rows from the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from laya_robustness.gate.run_limits import run_limits
from laya_robustness.run.inputs.resolution import resolve_limitations
from laya_robustness.gate.limits_file import ThresholdsError
from laya_robustness.run.files import write_all
from laya_robustness.run.inputs.run_inputs import reread_rows
from laya_robustness.run.pipeline.image_store import ImageStore
from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS
from laya_robustness.summary import summary_datasets

REPORT_HTML, SUMMARY_MD = "report.html", "summary.md"
#: At most this many baseline changes are listed (one more line says how many were left out).
CHANGE_LINES = 40


def render_report(
    summary: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    results: Iterable[Any] | None = None,
    known=None,
    invariance: Mapping[str, Any] | None = None,
    source_rows: Mapping[str, Sequence[Any]] | None = None,
    baseline: Mapping[str, Any] | None = None,
    baseline_results: Iterable[Any] | None = None,
    drawn: Callable[[str], str | None] | None = None,
) -> tuple[str, str]:
    """(report.html, summary.md) as text.

    Arguments as in ``report.build.build_report``; ``baseline`` is another run's summary to compare
    with, ``baseline_results`` its check results (for verdict changes); ``drawn``: the plots drawn elsewhere
    (``report.html.render_html``).
    """
    from laya_robustness.report.build import build_report
    from laya_robustness.report.cell_rows import cell_verdicts
    from laya_robustness.report.baseline_changes import summary_changes
    from laya_robustness.report.html import render_html
    from laya_robustness.report.markdown import render_markdown

    report = build_report(summary, records, results=results, known=known, invariance=invariance,
                          source_rows=source_rows, baseline=baseline)
    changes: list[str] = []
    if baseline is not None:
        known_ = known or (lambda family, dataset, check: None)
        old = cell_verdicts(baseline_results, known_) if baseline_results is not None else {}
        changes = summary_changes(summary, baseline, report.verdicts if old else {}, old, limit=CHANGE_LINES)
    return render_html(report, changes, drawn), render_markdown(report, changes)


def write_report(out_dir: str | Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]], *,
                 html_name: str = REPORT_HTML, md_name: str = SUMMARY_MD, **render) -> list[Path]:
    """Write ``report.html`` and ``summary.md`` (or the names given) into ``out_dir``, both or neither; returns
    their paths. ``render``: the keyword arguments of ``render_report``."""
    page, comment = render_report(summary, records, **render)
    out = Path(out_dir)
    return write_all({out / html_name: page, out / md_name: comment})


def load_run(predictions: str | Path) -> tuple[dict, list, dict | None]:
    """(summary, records, invariance) of a predictions file: the summary.json beside it, checked against the records
    (``report.read_back``; else the records summarised, with seed 0), and the invariance.json beside it when there
    is one."""
    from laya_robustness.report.read_back import (SUMMARY, check_against_records, read_json_object, read_records,
                                                  read_summary)

    predictions = Path(predictions)
    records = read_records(predictions)
    beside = predictions.parent / SUMMARY
    if beside.is_file():
        summary = read_summary(beside)
        check_against_records(summary, records, beside, predictions)
    else:
        from laya_robustness.summary import summarize

        summary = summarize(records)
    inv = predictions.parent / "invariance.json"
    return summary, records, read_json_object(inv, inv.name) if inv.is_file() else None


def load_summary(path: str | Path) -> dict:
    """A baseline's summary: a summary.json itself (its shape checked), or the one beside a predictions file (else its
    records summarised)."""
    from laya_robustness.report.read_back import read_summary

    path = Path(path)
    if path.suffix == ".json":
        return read_summary(path)
    return load_run(path)[0]


def load_limits(summary: Mapping[str, Any], thresholds: str | Path, limitations: str | Path | None):
    """The Thresholds the gate would use for this summary's datasets (``ThresholdsError`` -> ValueError)."""
    try:
        return run_limits(thresholds, datasets=summary_datasets(summary), conditions=INVARIANCE_CONDITIONS,
                          limitations=limitations)
    except ThresholdsError as exc:
        raise ValueError(str(exc)) from exc


def render_files(
    predictions: str | Path,
    out_dir: str | Path | None = None,
    *,
    baseline: str | Path | None = None,
    data: str | Path | None = None,
    thresholds: str | Path | None = "thresholds.toml",
    limitations: str = "auto",
) -> list[Path]:
    """Render report.html and summary.md offline (``out_dir``: default beside the predictions).

    ``data``: the rows the run scored (default: the summary meta's ``data``); without it the examples
    show no images. ``thresholds`` / ``limitations``: as the gate's options; a thresholds file that does
    not exist (or None) leaves the verdicts empty.
    """
    from laya_robustness.report.cell_rows import evaluate_summary

    predictions = Path(predictions)
    summary, records, invariance = load_run(predictions)
    meta = summary.get("meta") or {}
    data = data if data is not None else meta.get("data")
    model = (meta.get("model") or {}).get("model") if isinstance(meta.get("model"), Mapping) else meta.get("model")
    results = known = baseline_results = None
    base = load_summary(baseline) if baseline is not None else None
    if thresholds is not None and Path(thresholds).is_file():
        weights = (meta.get("model") or {}).get("weights_sha256") if isinstance(meta.get("model"), Mapping) else None
        overlay, _ = resolve_limitations(limitations, model, data, weights=weights or None)
        limits = load_limits(summary, thresholds, overlay)
        conditions = (invariance or {}).get("conditions")
        results = evaluate_summary(summary, limits, conditions)

        def known(family, dataset, check):
            hit = limits.known_limitation(family, dataset, check)
            return hit.reason if hit else None

        if base is not None:
            baseline_results = evaluate_summary(base, load_limits(base, thresholds, overlay))
    source_rows = None
    if data is not None:
        from laya_robustness.report.examples import check_source_rows

        source_rows = reread_rows(data, meta, ImageStore())  # decoded again only for the rows shown
        check_source_rows(meta, source_rows)
    return write_report(out_dir if out_dir is not None else predictions.parent, summary, records,
                        results=results, known=known, invariance=invariance, source_rows=source_rows,
                        baseline=base, baseline_results=baseline_results)
