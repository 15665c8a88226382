"""The ``meta`` blocks of summary.json and invariance.json: what was run, on what, with which versions (read from
``RunFacts``, the values a run hands over when it ends: its settings, rows and the loaded scorers' identities)."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from laya_robustness.run.device_names import device_name
from laya_robustness.run.inputs.fingerprints import data_fingerprint

LIBRARIES = ("laya-robustness", "torch", "transformers", "tokenizers", "pillow", "numpy")


@dataclass(frozen=True)
class RunFacts:
    """What the meta blocks say of a run: its ``settings`` (``run.inputs.options.Settings``), question and caption rows
    by dataset, the inputs' own meta (``RunInputs.spec.inputs_meta``), each scorer's identity by identity key, the
    model's name, the project root and, per device, where it was scored when not in this process (the executor's meta
    block, None for a local run)."""

    settings: Any
    rows: Mapping[str, list]
    caption_rows: Mapping[str, list]
    inputs_meta: dict
    identities: Mapping[str, dict]
    model_name: str
    root: Path
    executors: Mapping[str, dict | None] = field(default_factory=dict)


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_meta(facts: RunFacts, device: str) -> dict:
    """Seed, rows per set, the data (path and fingerprint), model identity (name and weight hashes), device,
    precision, batch size, versions, and where the rows were scored when not in this process."""
    s = facts.settings
    identity = dict(facts.identities.get(device, {}))
    identity["model"] = facts.model_name
    dual = facts.identities.get(f"{device}/dual")
    if dual:
        identity["dual"] = dict(dual)
    rows = {**facts.rows, **facts.caption_rows}
    meta = {
        "seed": s.seed,
        "rows_per_set": s.rows_per_set,
        "datasets": {name: len(r) for name, r in rows.items()},
        "data": str(s.data),
        "data_fingerprint": data_fingerprint(rows),
        "inputs": facts.inputs_meta,
        "families": list(s.families),
        "model": identity,
        "device": device,
        "scoring_path": s.scoring_path,
        "precision": {"batch": s.precision, "predict": "fp32"},
        "batch_size": s.batch_size,
        "temperatures": s.temperatures,
        "versions": library_versions(),
    }
    if s.limitations_note:
        meta["limitations_note"] = s.limitations_note
    return with_executor(meta, facts, device)


def with_executor(meta: dict, facts: RunFacts, device: str) -> dict:
    """``meta`` with the ``executor`` block of a run scored outside this process (``--executor ray``: the
    address, the actors, the nodes they ran on, their devices, the actors replaced); a local run has none."""
    executor = facts.executors.get(device)
    return meta if executor is None else {**meta, "executor": executor}


def code_commit(root) -> str:
    """The git commit of the checkout the gate runs from ("unknown" outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def invariance_meta(facts: RunFacts, device: str, conditions: Mapping[str, dict]) -> dict:
    """invariance.json's meta: device name, checkpoint hashes, datasets, seed, code commit, precisions."""
    executor = facts.executors.get(device) or {}
    s = facts.settings
    meta = {
        "device": device,
        "device_name": ", ".join(executor.get("device_names", ())) or device_name(device),
        "model": {**facts.identities.get(device, {}), "model": facts.model_name},
        "datasets": {name: min(len(rows), s.invariance_rows) for name, rows in facts.rows.items()},
        "seed": s.seed,
        "code_commit": code_commit(facts.root),
        "batch_size": s.batch_size,
        "precision": {name: stats["precision"] for name, stats in sorted(conditions.items())},
        "versions": library_versions(),
    }
    return with_executor(meta, facts, device)
