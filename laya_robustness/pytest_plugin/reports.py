"""Write a gate run's reports: predictions.jsonl.gz, summary.json and invariance.json, per device."""

from __future__ import annotations

import json
from pathlib import Path

from laya_robustness.predictions import write_predictions
from laya_robustness.report_meta import invariance_meta, run_meta
from laya_robustness.summary import summarize


def device_report_dir(session, device: str) -> Path:
    """``--report-dir`` itself when one device ran, else its ``<device>/`` subfolder (created)."""
    several = len(set(session.records) | set(session.invariance_results)) > 1
    out = session.report_dir / device if several else session.report_dir
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_reports(session) -> list[Path]:
    """predictions.jsonl.gz and summary.json per device, and invariance.json where conditions ran."""
    written = []
    for device, conditions in sorted(session.invariance_results.items()):
        path = device_report_dir(session, device) / "invariance.json"
        report = {"meta": invariance_meta(session, device), "conditions": dict(sorted(conditions.items()))}
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        written.append(path)
    for device, recs in sorted(session.records.items()):
        out = device_report_dir(session, device)
        ordered = [recs[k] for k in sorted(recs)]
        write_predictions(out / "predictions.jsonl.gz", ordered)
        summary = summarize(ordered, meta=run_meta(session, device), seed=session.seed,
                            ece_floor_sims=session.settings.ece_floor_sims)
        session.summaries[device] = summary
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        written += [out / "predictions.jsonl.gz", out / "summary.json"]
    return written
