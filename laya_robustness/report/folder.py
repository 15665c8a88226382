"""A run's report folder: every report of a ``run.gate_run.GateRun`` (the data files of ``run.reports``, and
report.html and summary.md per device rendered here), written all or none under their final names, then what a
complete run no longer needs (stale report files, the journal) removed."""

from __future__ import annotations

from pathlib import Path

from laya_robustness.report.render import REPORT_HTML, SUMMARY_MD, render_report
from laya_robustness.run.files import write_all
from laya_robustness.run.gate_run import GateRun
from laya_robustness.run.reports import data_files, device_report_dir, remove_stale, report_targets


def write_reports(run: GateRun, report_dir: Path | None = None) -> list[Path]:
    """Write every report of the run in ``report_dir`` (default ``--report-dir``: see the module doc); returns the
    paths written. A report that cannot be written (a full disk, a read-only folder) is a harness error naming
    the file, kept in ``run.harness_errors``; the folder keeps the files it had."""
    files = data_files(run, report_dir)
    files.update(gate_report_files(run, report_dir))
    try:
        written = write_all(report_targets(run, files))
    except OSError as exc:
        kept = "" if run.settings.journal else " (its journal keeps what was scored: --resume writes them " \
                                               "without scoring again)"
        folder = run.report_dir if report_dir is None else report_dir
        run.harness_errors.append(f"cannot write the reports: {exc}; {folder} keeps the files it had{kept}")
        return []
    if run.incomplete_reason is None:
        try:
            remove_stale(run, set(written), report_dir)
        except OSError as exc:
            run.harness_errors.append(f"cannot remove an earlier run's report file: {exc}")
    return written


def gate_report_files(run: GateRun, report_dir: Path | None = None) -> dict[Path, str]:
    """report.html and summary.md beside each device's summary.json (``run.summaries``, made by ``data_files``);
    the verdicts are the checks the run judged.

    A failure while rendering is a harness error (exit 3) kept in ``run.harness_errors``, not a crash: the data
    files are still written.
    """
    def known(family: str, dataset: str, check: str) -> str | None:
        hit = run.thresholds.known_limitation(family, dataset, check)
        return hit.reason if hit else None

    files: dict[Path, str] = {}
    for device, summary in sorted(run.summaries.items()):
        recs = run.records.get(device, {})
        conditions = run.invariance_results.get(device)
        try:
            page, comment = render_report(
                summary, [recs[k] for k in sorted(recs)], known=known, source_rows=run.rows,
                results=[r for r in run.results if r.get("device") == device],
                invariance={"conditions": conditions} if conditions else None)
        except Exception as exc:  # a bug of the report is the harness's: say so, keep the run's other reports
            message = f"writing report.html / summary.md for {device} failed: {type(exc).__name__}: {exc}"
            if message not in run.harness_errors:
                run.harness_errors.append(message)
            continue
        out = device_report_dir(run, device, report_dir)
        files[out / REPORT_HTML], files[out / SUMMARY_MD] = page, comment
    return files
