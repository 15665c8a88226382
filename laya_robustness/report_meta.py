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


def run_inputs(session) -> dict:
    """How the rows were read and what was attached to them: the reading rules, the caption file (when
    caption rows were probed) and the user's paraphrase, rephrasing and translation files (None: none).
    With ``data`` they are what re-reads the same rows offline (``report``)."""
    s = session.settings
    path = lambda p: None if p is None else str(p)  # noqa: E731
    return {"data_map": dict(s.data_map), "max_image_pixels": s.max_image_pixels, "max_image_side": s.max_image_side,
            "allow_outside_data": s.allow_outside_data,
            "captions": str(s.captions) if session.caption_rows else None, "paraphrases": path(s.paraphrases),
            "rephrasings": path(s.rephrasings), "translations": path(s.translations)}


def run_meta(session, device: str) -> dict:
    """Seed, rows per set, the data (path and fingerprint), model identity (name and weight hashes), device,
    precision, batch size, versions."""
    from laya_robustness.pytest_plugin.snapshot import data_fingerprint

    s = session.settings
    identity = dict(session.identities.get(device, {}))
    identity["model"] = s.model_name
    dual = session.identities.get(f"{device}/dual")
    if dual:
        identity["dual"] = dict(dual)
    return {
        "seed": s.seed,
        "rows_per_set": s.rows_per_set,
        "datasets": {name: len(rows) for name, rows in {**session.rows, **session.caption_rows}.items()},
        "data": str(s.data),
        "data_fingerprint": data_fingerprint({**session.rows, **session.caption_rows}),
        "inputs": run_inputs(session),
        "families": list(s.families),
        "model": identity,
        "device": device,
        "scoring_path": s.scoring_path,
        "precision": {"batch": s.precision, "predict": "fp32"},
        "batch_size": s.batch_size,
        "temperatures": s.temperatures,
        "versions": library_versions(),
    }


def code_commit(root) -> str:
    """The git commit of the checkout the gate runs from ("unknown" outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def device_name(device: str) -> str:
    """A readable name of the device: the CUDA device's name, or the CPU's platform string."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.machine()}, {platform.processor() or 'unknown processor'})"


def invariance_meta(session, device: str) -> dict:
    """invariance.json's meta: device name, checkpoint hashes, datasets, seed, code commit, precisions."""
    conditions = session.invariance_results.get(device, {})
    return {
        "device": device,
        "device_name": device_name(device),
        "model": {**session.identities.get(device, {}), "model": session.model_name},
        "datasets": {name: min(len(rows), session.settings.invariance_rows) for name, rows in session.rows.items()},
        "seed": session.seed,
        "code_commit": code_commit(session.config.rootpath),
        "batch_size": session.settings.batch_size,
        "precision": {name: stats["precision"] for name, stats in sorted(conditions.items())},
        "versions": library_versions(),
    }
