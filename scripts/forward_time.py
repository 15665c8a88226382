"""A pytest plugin that splits a gate run's wall time into model forwards and everything else.

    PYTHONPATH=scripts python -m pytest robustness_tests -p forward_time

At the end it prints one line: the session's wall time, the time inside the Hugging Face scorer's
language-model forwards (``HFVLMScorer._run`` less the attention masks it builds, ``_masks``), token
embeddings (``Adapter.embed``), vision encoder (``Adapter.image_features``) and LM head
(``Adapter.head``), and the rest (the harness: building variants, image preprocessing, prompts, masks,
bookkeeping, summaries, reports, imports and loading), each with its share of the wall time.
"""

import os
import time

TOTAL = {"language model": 0.0, "token embeddings": 0.0, "vision encoder": 0.0, "lm head": 0.0}
#: Harness time spent inside a timed call (building attention masks inside ``_run``), subtracted there.
INSIDE = {"language model": "masks"}
HARNESS = {"masks": 0.0}
START = [0.0]


def _timed(cls, name: str, key: str) -> None:
    inner = getattr(cls, name)
    into = HARNESS if key in HARNESS else TOTAL

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            into[key] += time.perf_counter() - start

    setattr(cls, name, wrapper)


def _process_age() -> float:
    """Seconds since this process started (Linux ``/proc``), so the wall time includes the interpreter's
    start and every import; 0 where ``/proc`` is not there (the wall time then starts at configure)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return float(uptime.read().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return 0.0


def pytest_configure(config):
    from laya_robustness.scoring.adapters.base import Adapter
    from laya_robustness.scoring.hf import HFVLMScorer

    START[0] = time.perf_counter() - _process_age()
    _timed(HFVLMScorer, "_run", "language model")
    _timed(HFVLMScorer, "_masks", "masks")
    _timed(Adapter, "embed", "token embeddings")
    _timed(Adapter, "image_features", "vision encoder")
    _timed(Adapter, "head", "lm head")


def pytest_unconfigure(config):
    wall = time.perf_counter() - START[0]
    for key, inside in INSIDE.items():
        TOTAL[key] -= HARNESS[inside]
    model = sum(TOTAL.values())
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in TOTAL.items())
    print(f"\nforward time: session {wall:.1f} s; model forwards {model:.1f} s ({model / wall:.1%}: {parts}); "
          f"everything else {wall - model:.1f} s ({1 - model / wall:.1%})")
