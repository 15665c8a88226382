"""A pytest plugin that splits a gate run's wall time into model forwards and everything else.

    PYTHONPATH=scripts python -m pytest robustness_tests -p forward_time

At the end it prints two lines. The first: the session's wall time (from the process's start), the
time inside the Hugging Face scorer's language-model forwards (``hf_forward.Forward.run`` less the attention
masks it builds, ``masks``), token embeddings (``Adapter.embed``), vision encoder
(``Adapter.image_features``) and LM head (``Adapter.head``), and the rest (the harness), each with its
share of the wall time. The second splits the harness into the costs a run pays once whatever its
rows (the interpreter's start up to configure; importing torch and transformers; loading models and
processors; writing the reports at session finish; the benchmarks' own work) and what is left, the
per-row harness (building variants, image preprocessing, prompts, masks, records, metrics).
"""

import importlib
import os
import time

import pytest

TOTAL = {"language model": 0.0, "token embeddings": 0.0, "vision encoder": 0.0, "lm head": 0.0}
#: Harness time spent inside a timed call (building attention masks inside ``Forward.run``), subtracted there.
INSIDE = {"language model": "masks"}
HARNESS = {"masks": 0.0}
#: The harness a run pays once (model time inside a benchmark is counted as model time, not here).
FIXED = {"start-up": 0.0, "imports": 0.0, "model loading": 0.0, "reports": 0.0, "benchmarks": 0.0}
START = [0.0]


def _timed(cls, name: str, key: str, into: dict) -> None:
    inner = getattr(cls, name)

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


def _model_time() -> float:
    return sum(TOTAL.values()) - sum(HARNESS[inside] for inside in INSIDE.values())


def pytest_configure(config):
    now = time.perf_counter()
    START[0] = now - _process_age()
    FIXED["start-up"] = now - START[0]
    importlib.import_module("torch")  # the run imports these anyway: timed here, once
    transformers = importlib.import_module("transformers")
    for lazy in ("AutoModelForImageTextToText", "AutoProcessor"):
        getattr(transformers, lazy)
    from laya_robustness.scoring.adapters.default import Adapter
    from laya_robustness.scoring.dual import DualEncoderScorer
    from laya_robustness.scoring.hf import HFVLMScorer
    from laya_robustness.scoring.hf_forward import Forward

    FIXED["imports"] = time.perf_counter() - now
    _timed(Forward, "run", "language model", TOTAL)
    _timed(Forward, "masks", "masks", HARNESS)
    _timed(Adapter, "embed", "token embeddings", TOTAL)
    _timed(Adapter, "image_features", "vision encoder", TOTAL)
    _timed(Adapter, "head", "lm head", TOTAL)
    _timed(HFVLMScorer, "from_pretrained", "model loading", FIXED)
    _timed(DualEncoderScorer, "from_pretrained", "model loading", FIXED)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return (yield)
    start, model = time.perf_counter(), _model_time()
    try:
        return (yield)
    finally:
        FIXED["benchmarks"] += (time.perf_counter() - start) - (_model_time() - model)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session):
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        FIXED["reports"] += time.perf_counter() - start


def pytest_unconfigure(config):
    wall = time.perf_counter() - START[0]
    for key, inside in INSIDE.items():
        TOTAL[key] -= HARNESS[inside]
    model = sum(TOTAL.values())
    harness = wall - model
    fixed = sum(FIXED.values())
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in TOTAL.items())
    once = ", ".join(f"{k} {v:.1f} s" for k, v in FIXED.items())
    print(f"\nforward time: session {wall:.1f} s; model forwards {model:.1f} s ({model / wall:.1%}: {parts}); "
          f"everything else {harness:.1f} s ({harness / wall:.1%})")
    print(f"harness: paid once {fixed:.1f} s ({fixed / wall:.1%}: {once}); "
          f"per-row work {harness - fixed:.1f} s ({(harness - fixed) / wall:.1%})")
