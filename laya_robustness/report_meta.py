"""The ``meta`` block of summary.json: what was run, on what, with which versions."""

from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("laya-robustness", "torch", "transformers", "tokenizers", "pillow", "numpy")


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_meta(session, device: str) -> dict:
    """Seed, rows per set, model identity (name and weight hashes), device, precision, batch size, versions."""
    identity = dict(session.identities.get(device, {}))
    identity["model"] = session.model_name
    return {
        "seed": session.seed,
        "rows_per_set": session.rows_per_set,
        "datasets": {name: len(rows) for name, rows in session.rows.items()},
        "families": list(session.families),
        "model": identity,
        "device": device,
        "precision": {"batch": session.precision, "predict": "fp32"},
        "batch_size": session.batch_size,
        "temperatures": session.temperatures,
        "versions": library_versions(),
    }
