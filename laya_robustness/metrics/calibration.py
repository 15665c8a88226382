"""Calibration: temperature-scaled softmax and the 15-bin expected calibration error (ECE)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

#: No scaling: the raw softmax of the logits.
DEFAULT_TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}
#: The published checkpoint's own temperatures (reference, "Setup").
REFERENCE_TEMPERATURES = {"choice": 2.20, "score": 1.37, "noul": 2.13}
N_BINS = 15


def calibrated_probs(logits: Sequence[float], primitive: str, temperatures: Mapping[str, float]) -> list[float]:
    """Softmax of the logits divided by the primitive's temperature.

    p_i = exp((z_i - max z) / T) / sum_j exp((z_j - max z) / T),  T = temperatures[primitive]

    >>> [round(p, 4) for p in calibrated_probs([0.0, 2.0], "choice", {"choice": 2.0})]
    [0.2689, 0.7311]
    """
    if primitive not in temperatures:
        raise ValueError(f"no temperature for primitive {primitive!r} (have: {', '.join(sorted(temperatures))})")
    t = float(temperatures[primitive])
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"temperature for {primitive!r} must be finite and > 0, got {t}")
    z = np.asarray(logits, dtype=float)
    if z.ndim != 1 or z.size == 0 or not np.all(np.isfinite(z)):
        raise ValueError(f"logits must be a non-empty list of finite numbers, got {list(logits)!r}")
    e = np.exp((z - z.max()) / t)
    return [float(p) for p in e / e.sum()]


def bin_indices(confidences: Sequence[float], n_bins: int = N_BINS) -> np.ndarray:
    """The bin of each confidence: bin b holds (e_b, e_{b+1}], e_k = k / n_bins; bin 0 also holds 0.

    The bins are closed on the right. The edges are float64 ``k / n_bins`` (the double nearest k/15), and a
    confidence is compared with them as the double it is: a value equal to edge e_k (k >= 1) belongs to the
    bin below it, b = k - 1, the next double above e_k to bin k. So 0.0 and every value in (0, 1/15] are
    bin 0, 0.2 (= 3/15) is bin 2 with 0.19 and not bin 3 with 0.21, and a maximum probability of exactly
    1.0 (a softmax that rounds to one-hot) is the top bin, b = n_bins - 1, with (14/15, 1).

    >>> bin_indices([0.0, 1 / 15, 0.5, 1.0]).tolist()
    [0, 0, 7, 14]
    """
    if not (isinstance(n_bins, int) and n_bins >= 1):
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    c = np.asarray(confidences, dtype=float)
    if c.ndim != 1 or not np.all((c >= 0) & (c <= 1)):
        raise ValueError("confidences must be a flat sequence of numbers in [0, 1]")
    edges = np.arange(n_bins + 1) / n_bins
    return np.clip(np.searchsorted(edges, c, side="left") - 1, 0, n_bins - 1)


def ece(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS) -> float:
    """Expected calibration error with equal-width bins on the max probability.

    ECE = sum_b (n_b / n) * |acc_b - conf_b| = sum_b |sum_{i in b} (correct_i - conf_i)| / n,
    where bin b holds confidences in (b/n_bins, (b+1)/n_bins] and bin 0 also holds 0: a value on an edge
    k/n_bins goes to the bin below it, a confidence of exactly 1.0 to the top bin (:func:`bin_indices`).

    >>> round(ece([0.9, 0.9, 0.6, 0.6], [True, False, True, True]), 6)
    0.4
    """
    ok = np.asarray(correct)
    if ok.ndim != 1 or ok.size != len(confidences) or ok.size == 0:
        raise ValueError(f"need as many correctness flags as confidences (>= 1), got {ok.size} and {len(confidences)}")
    if ok.dtype != bool and not np.all(np.isin(ok, (0, 1))):
        raise ValueError("correct must hold booleans (or 0/1)")
    bins = bin_indices(confidences, n_bins)
    gap = np.bincount(bins, weights=ok.astype(float) - np.asarray(confidences, dtype=float), minlength=n_bins)
    return float(np.abs(gap).sum() / ok.size)
