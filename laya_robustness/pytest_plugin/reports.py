"""The reports at the end of a gate run: the data files (``laya_robustness.run.reports``) and report.html and
summary.md per device from the session's state (``laya_robustness.report``), written all or none under their
final names, then what a complete run no longer needs (stale report files, the journal) removed."""

from __future__ import annotations

from pathlib import Path

from laya_robustness.report.render import REPORT_HTML, SUMMARY_MD, render_report
from laya_robustness.run.files import write_all
from laya_robustness.run.reports import data_files, device_report_dir, remove_stale, report_targets


def finish_reports(session) -> list[Path]:
    """Write every report of the run (see the module doc); returns the paths written. A report that cannot be
    written (a full disk, a read-only folder) is a harness error naming the file; the folder keeps the files
    it had."""
    files = data_files(session)
    files.update(gate_report_files(session))
    try:
        written = write_all(report_targets(session, files))
    except OSError as exc:
        kept = "" if session.settings.journal else " (its journal keeps what was scored: --resume writes them " \
                                                   "without scoring again)"
        session.harness_errors.append(f"cannot write the reports: {exc}; {session.report_dir} keeps the files it "
                                      f"had{kept}")
        return []
    if session.incomplete_reason is None:
        try:
            remove_stale(session, set(written))
        except OSError as exc:
            session.harness_errors.append(f"cannot remove an earlier run's report file: {exc}")
    return written


def gate_report_files(session) -> dict[Path, str]:
    """report.html and summary.md beside each device's summary.json (``session.summaries``, made by ``data_files``);
    the verdicts are the checks the tests ran.

    A failure while rendering is a harness error (exit 3) named in the terminal summary, not a crash of
    pytest: the data files are still written.
    """
    def known(family: str, dataset: str, check: str) -> str | None:
        hit = session.thresholds.known_limitation(family, dataset, check)
        return hit.reason if hit else None

    files: dict[Path, str] = {}
    for device, summary in sorted(session.summaries.items()):
        recs = session.records.get(device, {})
        conditions = session.invariance_results.get(device)
        try:
            page, comment = render_report(
                summary, [recs[k] for k in sorted(recs)], known=known, source_rows=session.rows,
                results=[r for r in session.results if r.get("device") == device],
                invariance={"conditions": conditions} if conditions else None)
        except Exception as exc:  # a bug of the report is the harness's: say so, keep the run's other reports
            message = f"writing report.html / summary.md for {device} failed: {type(exc).__name__}: {exc}"
            if message not in session.harness_errors:
                session.harness_errors.append(message)
            continue
        out = device_report_dir(session, device)
        files[out / REPORT_HTML], files[out / SUMMARY_MD] = page, comment
    return files
