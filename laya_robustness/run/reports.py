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

from typing import TYPE_CHECKING

from laya_robustness.gate.catalogue import CHECKS
from laya_robustness.gate.results import INVARIANCE
from laya_robustness.predictions import predictions_bytes
from laya_robustness.run.invariance import CONDITION_NAMES, DUAL_CONDITIONS, DUAL_PREFIX
from laya_robustness.run.journal import JOURNAL_DIR
from laya_robustness.run.meta import invariance_meta, run_meta
from laya_robustness.summary import summarize

if TYPE_CHECKING:
    from laya_robustness.run.gate_run import GateRun

#: The files a run writes in a report folder (what a complete run cleans up when it does not rewrite them).
REPORT_FILES = ("summary.json", "predictions.jsonl.gz", "invariance.json", "checks.json", "report.html", "summary.md")


def incomplete_name(name: str) -> str:
    """``summary.json`` -> ``summary.incomplete.json``; ``predictions.jsonl.gz`` -> ``predictions.incomplete.jsonl.gz``."""
    stem, _, rest = name.partition(".")
    return f"{stem}.incomplete.{rest}"


def device_report_dir(run: GateRun, device: str, report_dir: Path | None = None) -> Path:
    """``report_dir`` (default ``--report-dir``) itself when one device ran, else its ``<device>/`` subfolder."""
    folder = run.report_dir if report_dir is None else Path(report_dir)
    several = len(set(run.records) | set(run.invariance_results)) > 1
    return folder / device if several else folder


def _previous_is_complete(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return False
    return meta.get("complete", True) is True


def ordered_results(results: list[dict]) -> list[dict]:
    """Check results in an order that does not depend on the order the tests ran in: by family, then (for a
    family's cells) dataset and the catalogue's order of checks. Invariance results go by condition, in the
    declared order of the question model's conditions, then the dual encoder's (``dual:<condition>``); a
    condition's checks keep the order its judgement gives them."""
    rank = {check: i for i, check in enumerate(CHECKS)}
    conditions = [*CONDITION_NAMES, *(f"{DUAL_PREFIX}{c}" for c in DUAL_CONDITIONS)]
    condition_rank = {name: i for i, name in enumerate(conditions)}

    def key(r: dict):
        if r["family"] == INVARIANCE:
            return (r["family"], condition_rank.get(r["dataset"], len(conditions)), r["dataset"])
        return (r["family"], r["dataset"], rank.get(r["check"], len(rank)))

    return sorted(results, key=key)


def data_files(run: GateRun, report_dir: Path | None = None) -> dict[Path, bytes]:
    """Every device's data reports (see the module doc) by path under ``report_dir`` (default ``--report-dir``), as
    their final names; keeps each device's summary in ``run.summaries``."""
    complete = run.incomplete_reason is None
    files: dict[Path, bytes] = {}
    for device, conditions in sorted(run.invariance_results.items()):
        report = {"meta": invariance_meta(run, device), "conditions": dict(sorted(conditions.items()))}
        files[device_report_dir(run, device, report_dir) / "invariance.json"] = _json(report)
    for device, recs in sorted(run.records.items()):
        out = device_report_dir(run, device, report_dir)
        ordered = [recs[k] for k in sorted(recs)]
        files[out / "predictions.jsonl.gz"] = predictions_bytes(ordered)
        files[out / "summary.json"] = _json(device_summary(run, device, ordered, complete))
        results = ordered_results([r for r in run.results if r["device"] == device])
        files[out / "checks.json"] = _json({"meta": {"device": device, "complete": complete,
                                                     "interval_checks": run.n_interval_checks,
                                                     "alpha": run.thresholds.gate.alpha}, "results": results})
    return files


def device_summary(run: GateRun, device: str, ordered: list | None = None, complete: bool | None = None) -> dict:
    """summary.json of one device (its meta included), kept in ``run.summaries``: the snapshot's summary when no
    --baseline or ECE floor adds to it."""
    complete = run.incomplete_reason is None if complete is None else complete
    recs = run.records.get(device, {})
    ordered = [recs[k] for k in sorted(recs)] if ordered is None else ordered
    meta = {**run_meta(run, device), "complete": complete}
    if not complete:
        meta["incomplete_reason"] = run.incomplete_reason
    if device in run.scopes:
        meta["scope"] = run.scopes[device].meta()
    settings = run.settings
    if settings.baseline is None and not settings.ece_floor_sims:
        summary = {**run.records_summary(device), "meta": meta}  # the snapshot's, when it ran
    else:
        baseline = run.inputs.baseline_records if settings.baseline is not None else None
        summary = summarize(ordered, meta=meta, seed=run.seed, ece_floor_sims=settings.ece_floor_sims,
                            baseline=baseline)
    run.summaries[device] = summary
    return summary


def report_targets(run: GateRun, files: dict[Path, bytes]) -> dict[Path, bytes]:
    """``files`` under the names they are written as: their own, or their incomplete twins when this run is
    incomplete and a complete report is in one of their folders (``run.kept_previous_report`` says which)."""
    complete = run.incomplete_reason is None
    run.kept_previous_report = not complete and any(_previous_is_complete(p.parent) for p in files)
    if not run.kept_previous_report:
        return dict(files)
    return {path.with_name(incomplete_name(path.name)): data for path, data in files.items()}


def _json(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def remove_stale(run: GateRun, written: set[Path], report_dir: Path | None = None) -> None:
    """Report files of earlier runs in the folders this run reports to (and their incomplete twins), and the
    journal of ``--report-dir``."""
    folder = run.report_dir if report_dir is None else Path(report_dir)
    folders = {folder} | {p.parent for p in written}
    for folder in folders:
        for name in REPORT_FILES:
            for path in (folder / name, folder / incomplete_name(name)):
                if path not in written and path.exists():
                    path.unlink()
    shutil.rmtree(run.report_dir / JOURNAL_DIR, ignore_errors=True)
