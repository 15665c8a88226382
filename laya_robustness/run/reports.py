"""Write a gate run's data reports: predictions.jsonl.gz, summary.json, checks.json (every check's result and
decision) and invariance.json per device (report.html and summary.md beside them are rendered by
``laya_robustness.report``).

A run's report files are written all or none (``laya_robustness.run.files.write_all``), so a reader never
sees half a report and a full disk leaves the earlier one as it was. A run that did not finish (interrupted,
stopped early, a harness error) or whose tests left cells of its ``--families`` unjudged (``-k``, ``--lf``,
``-x``: see ``laya_robustness.run.scope``) says so in the summary's meta (``complete: false``, the reason and
the scope) and on the terminal, and never replaces the complete report of an earlier run: its files then get
an ``.incomplete`` infix. A complete run removes the report files it did not write this time (a stale
invariance.json of an older run, say) and the scoring journal it no longer needs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from laya_robustness.gate.catalogue import CHECKS
from laya_robustness.gate.results import INVARIANCE
from laya_robustness.predictions import predictions_bytes
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


def data_files(session) -> dict[Path, bytes]:
    """Every device's data reports (see the module doc) by path, as their final names; keeps each device's summary
    in ``session.summaries``."""
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
        if device in session.scopes:
            meta["scope"] = session.scopes[device].meta()
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
    return files


def report_targets(session, files: dict[Path, bytes]) -> dict[Path, bytes]:
    """``files`` under the names they are written as: their own, or their incomplete twins when this run is
    incomplete and a complete report is in one of their folders (``session.kept_previous_report`` says which)."""
    complete = session.incomplete_reason is None
    session.kept_previous_report = not complete and any(_previous_is_complete(p.parent) for p in files)
    if not session.kept_previous_report:
        return dict(files)
    return {path.with_name(incomplete_name(path.name)): data for path, data in files.items()}


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
