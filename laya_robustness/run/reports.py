"""Write a gate run's data reports: predictions.jsonl.gz, summary.json, checks.json (every check's result and
decision) and invariance.json per device (report.html and summary.md beside them are rendered by
``laya_robustness.report``).

Every file is written atomically (a temporary file in the same folder, then a rename), so a reader
never sees half a report. A run that did not finish (interrupted, stopped early, a harness error)
says so in the summary's meta (``complete: false`` and the reason) and on the terminal, and never
replaces the complete report of an earlier run: its files then get an ``.incomplete`` infix. A
complete run removes the report files it did not write this time (a stale invariance.json of an
older run, say) and the scoring journal it no longer needs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from laya_robustness.gate.catalogue import CHECKS
from laya_robustness.gate.results import INVARIANCE
from laya_robustness.predictions import predictions_bytes
from laya_robustness.run.files import atomic_write
from laya_robustness.run.journal import JOURNAL_DIR
from laya_robustness.run.meta import invariance_meta, run_meta
from laya_robustness.summary import summarize

#: The files a run writes in a report folder (what a complete run cleans up when it does not rewrite them).
REPORT_FILES = ("summary.json", "predictions.jsonl.gz", "invariance.json", "checks.json", "report.html", "summary.md")


def incomplete_name(name: str) -> str:
    """``summary.json`` -> ``summary.incomplete.json``; ``predictions.jsonl.gz`` -> ``predictions.incomplete.jsonl.gz``."""
    stem, _, rest = name.partition(".")
    return f"{stem}.incomplete.{rest}"


def device_report_dir(session, device: str) -> Path:
    """``--report-dir`` itself when one device ran, else its ``<device>/`` subfolder."""
    several = len(set(session.records) | set(session.invariance_results)) > 1
    return session.report_dir / device if several else session.report_dir


def _previous_is_complete(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return False
    return meta.get("complete", True) is True


def ordered_results(results: list[dict]) -> list[dict]:
    """Check results in an order that does not depend on the order the tests ran in: by family, then (for a
    family's cells) dataset and the catalogue's order of checks. An invariance condition's results keep the
    order they were judged in (the condition tests' own parametrisation: the question model's, then the dual
    encoder's, which name the same conditions)."""
    rank = {check: i for i, check in enumerate(CHECKS)}

    def key(r: dict):
        if r["family"] == INVARIANCE:
            return (r["family"],)
        return (r["family"], r["dataset"], rank.get(r["check"], len(rank)))

    return sorted(results, key=key)


def write_reports(session) -> list[Path]:
    """Write every device's reports (see the module doc); returns the paths written."""
    complete = session.incomplete_reason is None
    files: dict[Path, bytes] = {}
    for device, conditions in sorted(session.invariance_results.items()):
        report = {"meta": invariance_meta(session, device), "conditions": dict(sorted(conditions.items()))}
        files[device_report_dir(session, device) / "invariance.json"] = _json(report)
    for device, recs in sorted(session.records.items()):
        out = device_report_dir(session, device)
        ordered = [recs[k] for k in sorted(recs)]
        meta = {**run_meta(session, device), "complete": complete}
        if not complete:
            meta["incomplete_reason"] = session.incomplete_reason
        if session.settings.baseline is None and not session.settings.ece_floor_sims:
            summary = {**session.records_summary(device), "meta": meta}  # the snapshot's, when it ran
        else:
            baseline = session.baseline_records if session.settings.baseline is not None else None
            summary = summarize(ordered, meta=meta, seed=session.seed,
                                ece_floor_sims=session.settings.ece_floor_sims, baseline=baseline)
        session.summaries[device] = summary
        files[out / "predictions.jsonl.gz"] = predictions_bytes(ordered)
        files[out / "summary.json"] = _json(summary)
        results = ordered_results([r for r in session.results if r["device"] == device])
        files[out / "checks.json"] = _json({"meta": {"device": device, "complete": complete,
                                                     "interval_checks": session.n_interval_checks,
                                                     "alpha": session.thresholds.gate.alpha}, "results": results})
    keep_previous = not complete and any(_previous_is_complete(p.parent) for p in files)
    written = []
    for path, data in files.items():
        target = path.with_name(incomplete_name(path.name)) if keep_previous else path
        atomic_write(target, data)
        written.append(target)
    session.kept_previous_report = keep_previous
    return written


def _json(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def remove_stale(session, written: set[Path]) -> None:
    """Report files of earlier runs in the folders this run reports to (and their incomplete twins)."""
    folders = {session.report_dir} | {p.parent for p in written}
    for folder in folders:
        for name in REPORT_FILES:
            for path in (folder / name, folder / incomplete_name(name)):
                if path not in written and path.exists():
                    path.unlink()
    shutil.rmtree(session.report_dir / JOURNAL_DIR, ignore_errors=True)
