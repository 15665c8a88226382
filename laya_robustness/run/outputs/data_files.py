"""A gate run's data reports, made from its outcome (``run.outcome.RunOutcome``): predictions.jsonl.gz,
summary.json, checks.json (every check's result and decision) and invariance.json per device, as bytes by path
(report.html and summary.md beside them are rendered by ``laya_robustness.report``, which writes them all).

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
from typing import Callable, Mapping

from laya_robustness.gate.catalogue import CHECKS
from laya_robustness.gate.results import INVARIANCE
from laya_robustness.predictions import predictions_bytes
from laya_robustness.records import Record
from laya_robustness.run.held import Held
from laya_robustness.run.outcome import DeviceReport, RunOutcome
from laya_robustness.run.outputs.meta import RunFacts, invariance_meta, run_meta
from laya_robustness.run.scope import Scope
from laya_robustness.run.pipeline.invariance import CONDITION_NAMES, DUAL_CONDITIONS, DUAL_PREFIX

#: The files a run writes in a report folder (what a complete run cleans up when it does not rewrite them).
REPORT_FILES = ("summary.json", "predictions.jsonl.gz", "invariance.json", "checks.json", "report.html", "summary.md")


def incomplete_name(name: str) -> str:
    """``summary.json`` -> ``summary.incomplete.json``; ``predictions.jsonl.gz`` -> ``predictions.incomplete.jsonl.gz``."""
    stem, _, rest = name.partition(".")
    return f"{stem}.incomplete.{rest}"


def device_folders(devices) -> dict[str, str]:
    """Each device's folder under the report folder: the folder itself (``""``) when one device reports, else
    its ``<device>/`` subfolder."""
    devices = sorted(set(devices))
    return {device: device if len(devices) > 1 else "" for device in devices}


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


def device_report(device: str, folder: str, records: Mapping[str, Record], results: list[dict],
                  conditions: Mapping[str, dict] | None, *, summary: dict | None, checks_meta: dict,
                  invariance_meta: dict | None) -> DeviceReport:
    """One device's reports as values (``run.outcome.DeviceReport``): its records ordered by row id, checks.json
    (its results in ``ordered_results``' order) and summary.json when it scored rows, invariance.json when it ran
    a condition."""
    ordered = tuple(records[k] for k in sorted(records))
    checks = {"meta": checks_meta, "results": ordered_results(results)} if records else None
    invariance = None if conditions is None else {"meta": invariance_meta,
                                                  "conditions": dict(sorted(conditions.items()))}
    return DeviceReport(device, folder, summary if records else None, checks, invariance, ordered)


def device_reports(held: Held, facts: RunFacts, reason: str | None, scopes: Mapping[str, Scope],
                   summary_of: Callable[[str, Mapping[str, Record], dict], dict],
                   gate_meta: Callable[[], dict]) -> dict[str, DeviceReport]:
    """Each reporting device's reports (``device_report``) from what the run ``held``: its summary's meta (``facts``)
    says whether the run is complete (``reason`` why not) and what it covers (``scopes``); ``summary_of(device,
    records, meta)`` makes summary.json, ``gate_meta()`` the limits' part of checks.json's meta."""
    out = {}
    for device, folder in device_folders(held.devices()).items():
        records, conditions = held.records.get(device, {}), held.invariance.get(device)
        meta = {**run_meta(facts, device), "complete": reason is None}
        if reason is not None:
            meta["incomplete_reason"] = reason
        if device in scopes:
            meta["scope"] = scopes[device].meta()
        out[device] = device_report(
            device, folder, records, [r for r in held.results if r["device"] == device], conditions,
            summary=summary_of(device, records, meta) if records else None,
            checks_meta={"device": device, "complete": reason is None, **(gate_meta() if records else {})},
            invariance_meta=invariance_meta(facts, device, conditions) if conditions is not None else None)
    return out


def data_files(outcome: RunOutcome, report_dir: Path) -> dict[Path, bytes]:
    """Every device's data reports (see the module doc) by path under ``report_dir``, as their final names."""
    files: dict[Path, bytes] = {}
    for device, report in sorted(outcome.reports.items()):
        out = report_dir / report.folder if report.folder else report_dir
        if report.invariance is not None:
            files[out / "invariance.json"] = _json(report.invariance)
        if report.summary is not None:
            files[out / "predictions.jsonl.gz"] = predictions_bytes(list(report.records))
            files[out / "summary.json"] = _json(report.summary)
            files[out / "checks.json"] = _json(report.checks)
    return files


def report_targets(files: dict[Path, bytes], complete: bool) -> tuple[dict[Path, bytes], bool]:
    """``files`` under the names they are written as, and whether a complete report was kept: their own names,
    or their incomplete twins when this run is incomplete and a complete report is in one of their folders."""
    kept = not complete and any(_previous_is_complete(p.parent) for p in files)
    if not kept:
        return dict(files), False
    return {path.with_name(incomplete_name(path.name)): data for path, data in files.items()}, True


def _json(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def remove_stale(report_dir: Path, written: set[Path], journal_dir: Path) -> None:
    """Report files of earlier runs in the folders this run reports to (and their incomplete twins), and the
    journal ``journal_dir`` (``--report-dir``'s)."""
    folders = {Path(report_dir)} | {p.parent for p in written}
    for folder in folders:
        for name in REPORT_FILES:
            for path in (folder / name, folder / incomplete_name(name)):
                if path not in written and path.exists():
                    path.unlink()
    shutil.rmtree(journal_dir, ignore_errors=True)
