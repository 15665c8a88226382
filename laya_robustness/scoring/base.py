"""The scorer contract and the step that turns scored rows into prediction records."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from laya_robustness.metrics.calibration import calibrated_probs
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


def prediction_record(row: Row, logits: np.ndarray, temperatures: dict) -> dict:
    """One predictions.jsonl line: ids, family/variant, label, raw logits (4 d.p.), probs (5 d.p.), argmax, meta.

    The argmax is taken on the rounded logits, so the record is self-consistent
    and a summary re-made from the file equals the online one.
    """
    rounded = [round(float(x), 4) for x in logits]
    probs = calibrated_probs(rounded, row.primitive, temperatures)
    return {
        "row_id": row.row_id, "group_id": row.group_id, "cluster": row.cluster, "dataset": row.dataset,
        "family": row.family, "variant": row.variant, "primitive": row.primitive, "label": row.label,
        "n_images": len(row.images), "logits": rounded, "probs": [round(float(p), 5) for p in probs],
        "argmax": int(np.argmax(rounded)), "meta": dict(row.meta),
    }
