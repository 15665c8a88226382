"""A scorer with a planted regression: it changes a known share of one family's answers, so the gate's
power to catch a regression can be measured (``python -m laya_robustness calibrate-gate --plant``).

It wraps the Hugging Face scorer. For a row of the planted family, ``keyed_rng(seed, "planted",
row_id)`` draws u ~ U(0, 1); when u < rate the row's two largest logits are swapped, so its answer
moves to the runner-up option (a yes/no row answers the other way). Every other row is scored as
the model scores it. A plug-in factory: ``--scorer laya_robustness.scoring.planted:factory`` with
``LAYA_PLANTED_FAMILY`` (default ``text``), ``LAYA_PLANTED_RATE`` (default ``0.05``) and
``LAYA_PLANTED_SEED`` (default ``0``; the calibration passes each run's ``--seed``, so every seed
plants the regression in other rows) in the environment.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from laya_robustness.rng import keyed_rng


def planted(row, logits, family: str, rate: float, seed: int = 0) -> np.ndarray:
    """The row's logits, with the top two swapped when the row is one of the planted family's drawn share."""
    logits = np.array(logits, dtype=np.float64)
    if row.family != family or len(logits) < 2 or keyed_rng(seed, "planted", row.row_id).random() >= rate:
        return logits
    top, second = np.argsort(-logits, kind="stable")[:2]
    logits[[top, second]] = logits[[second, top]]
    return logits


class PlantedRegression:
    """Scores like ``inner``, then plants the regression into ``family``'s rows (see the module doc)."""

    def __init__(self, inner, family: str, rate: float, seed: int = 0):
        if not 0 <= rate <= 1:
            raise ValueError(f"the planted rate must lie in [0, 1], got {rate}")
        self.inner, self.family, self.rate, self.seed = inner, family, rate, seed
        self.identity = {**getattr(inner, "identity", {}), "planted": {"family": family, "rate": rate, "seed": seed}}

    def score_batch(self, rows: Sequence) -> list[np.ndarray]:
        return [planted(r, lg, self.family, self.rate, self.seed) for r, lg in zip(rows, self.inner.score_batch(rows))]

    def score_predict(self, rows: Sequence, use_cache: bool = True) -> list[np.ndarray]:
        scored = self.inner.score_predict(rows, use_cache=use_cache)
        return [planted(r, lg, self.family, self.rate, self.seed) for r, lg in zip(rows, scored)]


def factory(model: str, **kwargs) -> PlantedRegression:
    """The plug-in factory: the Hugging Face scorer of ``model`` with the regression of the environment."""
    from laya_robustness.scoring.factory import load_scorer

    family = os.environ.get("LAYA_PLANTED_FAMILY", "text")
    rate = float(os.environ.get("LAYA_PLANTED_RATE", "0.05"))
    seed = int(os.environ.get("LAYA_PLANTED_SEED", "0"))
    return PlantedRegression(load_scorer("hf", model, **kwargs), family, rate, seed)
