"""A pytest plugin that splits a gate run's wall time into model forwards and everything else.

    PYTHONPATH=scripts python -m pytest robustness_tests -p forward_time

At the end it prints one line: the session's wall time, the time inside the Hugging Face scorer's
language-model forwards (``HFVLMScorer._run``), vision encoder (``Adapter.image_features``) and LM
head (``Adapter.head``), and the rest (the harness: building variants, image preprocessing, prompts,
bookkeeping, summaries, reports, imports and loading), each with its share of the wall time.
"""

import time

TOTAL = {"language model": 0.0, "vision encoder": 0.0, "lm head": 0.0}
START = [0.0]


def _timed(cls, name: str, key: str) -> None:
    inner = getattr(cls, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TOTAL[key] += time.perf_counter() - start

    setattr(cls, name, wrapper)


def pytest_configure(config):
    from laya_robustness.scoring.adapters.base import Adapter
    from laya_robustness.scoring.hf import HFVLMScorer

    START[0] = time.perf_counter()
    _timed(HFVLMScorer, "_run", "language model")
    _timed(Adapter, "image_features", "vision encoder")
    _timed(Adapter, "head", "lm head")


def pytest_unconfigure(config):
    wall = time.perf_counter() - START[0]
    model = sum(TOTAL.values())
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in TOTAL.items())
    print(f"\nforward time: session {wall:.1f} s; model forwards {model:.1f} s ({model / wall:.1%}: {parts}); "
          f"everything else {wall - model:.1f} s ({1 - model / wall:.1%})")
