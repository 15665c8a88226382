"""The ``meta`` blocks of summary.json and invariance.json: what was run, on what, with which versions (read from
the run: its settings, inputs, rows and the loaded scorers' identities)."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import TYPE_CHECKING

from laya_robustness.run.device_names import device_name
from laya_robustness.run.fingerprints import data_fingerprint

if TYPE_CHECKING:
    from laya_robustness.run.gate_run import GateRun

LIBRARIES = ("laya-robustness", "torch", "transformers", "tokenizers", "pillow", "numpy")


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_meta(run: GateRun, device: str) -> dict:
    """Seed, rows per set, the data (path and fingerprint), model identity (name and weight hashes), device,
    precision, batch size, versions, and where the rows were scored when not in this process."""
    s = run.settings
    identity = dict(run.identities.get(device, {}))
    identity["model"] = run.model_name
    dual = run.identities.get(f"{device}/dual")
    if dual:
        identity["dual"] = dict(dual)
    meta = {
        "seed": s.seed,
        "rows_per_set": s.rows_per_set,
        "datasets": {name: len(rows) for name, rows in {**run.rows, **run.caption_rows}.items()},
        "data": str(s.data),
        "data_fingerprint": data_fingerprint({**run.rows, **run.caption_rows}),
        "inputs": run.inputs.spec.inputs_meta(),
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
    return with_executor(meta, run, device)


def with_executor(meta: dict, run: GateRun, device: str) -> dict:
    """``meta`` with the ``executor`` block of a run scored outside this process (``--executor ray``: the
    address, the actors, the nodes they ran on, their devices, the actors replaced); a local run has none."""
    executor = run.models.executor_meta(device)
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


def invariance_meta(run: GateRun, device: str) -> dict:
    """invariance.json's meta: device name, checkpoint hashes, datasets, seed, code commit, precisions."""
    conditions = run.invariance_results.get(device, {})
    executor = run.models.executor_meta(device) or {}
    meta = {
        "device": device,
        "device_name": ", ".join(executor.get("device_names", ())) or device_name(device),
        "model": {**run.identities.get(device, {}), "model": run.model_name},
        "datasets": {name: min(len(rows), run.settings.invariance_rows) for name, rows in run.rows.items()},
        "seed": run.seed,
        "code_commit": code_commit(run.root),
        "batch_size": run.settings.batch_size,
        "precision": {name: stats["precision"] for name, stats in sorted(conditions.items())},
        "versions": library_versions(),
    }
    return with_executor(meta, run, device)
