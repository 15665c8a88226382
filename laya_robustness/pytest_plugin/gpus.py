"""One GPU per xdist worker (picked from the worker id before torch initialises CUDA), and a CPU share."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import MutableMapping


def visible_gpus(environ: MutableMapping[str, str]) -> list[str]:
    """The GPUs this process may use: an outer ``CUDA_VISIBLE_DEVICES``, else those ``nvidia-smi -L`` lists."""
    outer = environ.get("CUDA_VISIBLE_DEVICES")
    if outer is not None:
        return [d.strip() for d in outer.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def assign_worker_gpu(worker_id: str, environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``CUDA_VISIBLE_DEVICES`` to the worker's own GPU (``gw<i>`` gets visible GPU ``i mod n``).

    Returns the GPU chosen, or None when no GPU is visible. Must run before torch
    touches CUDA, which is why the plugin calls it from ``pytest_configure``.
    """
    environ = os.environ if environ is None else environ
    gpus = visible_gpus(environ)
    if not gpus or not worker_id.startswith("gw"):
        return None
    chosen = gpus[int(worker_id[2:]) % len(gpus)]
    environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def worker_threads(worker_count: int, environ: MutableMapping[str, str] | None = None) -> int | None:
    """The CPU threads one of ``worker_count`` workers should use: cores / workers, at least 1.

    None when the user pinned ``OMP_NUM_THREADS`` themselves (theirs wins). Without this, every worker
    would start one thread per core and the workers would oversubscribe the machine.
    """
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS") or worker_count < 1:
        return None
    return max(1, (os.cpu_count() or 1) // worker_count)
