"""The reports at the end of a gate run: the data files (``laya_robustness.run.reports``), then report.html and
summary.md per device from the session's state (``laya_robustness.report``), then what a complete run no
longer needs (stale report files, the journal) removed."""

from __future__ import annotations

from pathlib import Path

from laya_robustness.report.render import REPORT_HTML, SUMMARY_MD, write_report
from laya_robustness.run.reports import device_report_dir, incomplete_name, remove_stale, write_reports


def finish_reports(session) -> list[Path]:
    """Write every report of the run (see the module doc); returns the paths written."""
    written = write_reports(session)
    written += write_gate_reports(session, incomplete=session.kept_previous_report)
    if session.incomplete_reason is None:
        remove_stale(session, set(written))
    return written


def write_gate_reports(session, incomplete: bool = False) -> list[Path]:
    """report.html and summary.md beside each device's summary.json; the verdicts are the checks the tests ran.

    ``incomplete``: name them as the incomplete run's other files (``report.incomplete.html``), which
    keep a complete earlier run's reports. A failure while rendering is a harness error (exit 3) named
    in the terminal summary, not a crash of pytest: summary.json and the predictions are already written.
    """
    names = {"html_name": REPORT_HTML, "md_name": SUMMARY_MD}
    if incomplete:
        names = {k: incomplete_name(v) for k, v in names.items()}

    def known(family: str, dataset: str, check: str) -> str | None:
        hit = session.thresholds.known_limitation(family, dataset, check)
        return hit.reason if hit else None

    written: list[Path] = []
    for device, summary in sorted(session.summaries.items()):
        recs = session.records.get(device, {})
        conditions = session.invariance_results.get(device)
        try:
            written += write_report(
                device_report_dir(session, device), summary, [recs[k] for k in sorted(recs)],
                results=[r for r in session.results if r.get("device") == device], known=known,
                invariance={"conditions": conditions} if conditions else None, source_rows=session.rows, **names)
        except Exception as exc:  # a bug of the report is the harness's: say so, keep the run's other reports
            message = f"writing report.html / summary.md for {device} failed: {type(exc).__name__}: {exc}"
            if message not in session.harness_errors:
                session.harness_errors.append(message)
    return written
