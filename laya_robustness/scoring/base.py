"""The scorer contract: what the harness calls on a scorer, and the display-order -> label-order map."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from laya_robustness.rows import Row


class Scorer(Protocol):
    """Anything that scores rows: logits per option, in label order, one array per row."""

    identity: dict

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path: many rows per forward."""

    def score_predict(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The predict path: fp32, the given rows (one image's questions) in one call."""


def to_label_order(row: Row, shown_logits: Sequence[float]) -> np.ndarray:
    """Map logits given in display order back to label order."""
    shown = np.asarray(shown_logits, dtype=np.float64)
    if row.display_order is None:
        return shown
    out = np.empty_like(shown)
    out[list(row.display_order)] = shown
    return out
