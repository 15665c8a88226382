"""A run's report folder: every report of a run's outcome (``run.outcome.RunOutcome``: the data files of
``run.outputs.data_files``, and report.html and summary.md per device rendered here), written all or none under their
final names, then what a complete run no longer needs (stale report files, the journal) removed."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from laya_robustness.report.render import REPORT_HTML, SUMMARY_MD, render_report
from laya_robustness.run.files import write_all
from laya_robustness.run.outcome import RunOutcome
from laya_robustness.run.outputs.data_files import data_files, remove_stale, report_targets
from laya_robustness.run.pipeline.journal import JOURNAL_DIR


#: ``drawn(device, name)``: the HTML section of plot ``name`` of ``device``'s report.html drawn elsewhere, or None.
Drawn = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class Written:
    """What writing a run's reports did: the paths written, whether the complete report of an earlier run was kept
    (this run's files then have ``.incomplete`` in their names), and the harness errors it met."""

    paths: tuple[Path, ...]
    kept_previous_report: bool
    errors: tuple[str, ...]


def write_reports(outcome: RunOutcome, report_dir: Path, drawn: Drawn | None = None) -> Written:
    """Write every report of ``outcome`` in ``report_dir`` (see the module doc; ``drawn``: the plots drawn elsewhere,
    as ``gate_report_files``). A report that cannot be written (a full disk, a read-only folder) is a harness error
    naming the file; the folder keeps the files it had."""
    report_dir = Path(report_dir)
    files, errors = data_files(outcome, report_dir), []
    pages, render_errors = gate_report_files(outcome, report_dir, drawn)
    files.update(pages)
    errors += render_errors
    targets, kept = report_targets(files, outcome.complete)
    try:
        written = write_all(targets)
    except OSError as exc:
        journal = "" if outcome.journal_given else " (its journal keeps what was scored: --resume writes them " \
                                                   "without scoring again)"
        errors.append(f"cannot write the reports: {exc}; {report_dir} keeps the files it had{journal}")
        return Written((), kept, tuple(errors))
    if outcome.complete:
        try:
            remove_stale(report_dir, set(written), outcome.report_dir / JOURNAL_DIR)
        except OSError as exc:
            errors.append(f"cannot remove an earlier run's report file: {exc}")
    return Written(tuple(written), kept, tuple(errors))


def written_to(outcome: RunOutcome, report_dir: Path, drawn: Drawn | None = None) -> RunOutcome:
    """``outcome`` once its reports are written in ``report_dir`` (what was written, kept and went wrong in it)."""
    done = write_reports(outcome, report_dir, drawn)
    return outcome.with_written(done.paths, done.kept_previous_report, done.errors)


def gate_report_files(outcome: RunOutcome, report_dir: Path,
                      drawn: Drawn | None = None) -> tuple[dict[Path, str], list[str]]:
    """report.html and summary.md beside each device's summary.json; the verdicts are the checks the run judged.
    ``drawn(device, name)``: the section of plot ``name`` of a device's page where another process drew it
    (``report.drawn_elsewhere``), else None (drawn here).

    A failure while rendering is a harness error (exit 3) returned beside the pages, not a crash: the data files
    are still written.
    """
    files: dict[Path, str] = {}
    errors: list[str] = []
    for device, report in sorted(outcome.reports.items()):
        if report.summary is None:
            continue
        conditions = report.conditions
        try:
            page, comment = render_report(
                report.summary, list(report.records), known=outcome.known_limitation,
                source_rows=dict(outcome.source_rows), results=report.results,
                invariance={"conditions": conditions} if conditions else None,
                drawn=None if drawn is None else functools.partial(drawn, device))
        except Exception as exc:  # a bug of the report is the harness's: say so, keep the run's other reports
            errors.append(f"writing report.html / summary.md for {device} failed: {type(exc).__name__}: {exc}")
            continue
        out = report_dir / report.folder if report.folder else report_dir
        files[out / REPORT_HTML], files[out / SUMMARY_MD] = page, comment
    return files, errors
