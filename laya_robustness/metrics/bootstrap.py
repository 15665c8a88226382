"""Percentile bootstrap over image clusters: resample-count matrices and the intervals built on them.

A resample draws C clusters with replacement out of the C clusters of a (family, dataset) cell;
every row and group of a drawn cluster comes along, as often as the cluster was drawn. Each
statistic is a ratio of per-cluster sums, so one resample is a dot product with the count row.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from laya_robustness.metrics.calibration import N_BINS, bin_indices
from laya_robustness.rng import keyed_rng

LEVEL = 0.95


def cluster_index(clusters: Iterable[str]) -> dict[str, int]:
    """The distinct cluster names, sorted, numbered 0..C-1 (the columns of a count matrix)."""
    return {c: i for i, c in enumerate(sorted(set(clusters)))}


def resample_counts(seed: int, family: str, dataset: str, n_clusters: int, n_boot: int) -> np.ndarray:
    """An (n_boot, n_clusters) int matrix: m[b, c] = times cluster c is drawn in resample b.

    Each row is n_clusters draws with replacement, from keyed_rng(seed, "bootstrap", family, dataset).

    >>> resample_counts(0, "text", "vsr", 3, 2).sum(axis=1).tolist()
    [3, 3]
    """
    for name, value in (("n_clusters", n_clusters), ("n_boot", n_boot)):
        if not (isinstance(value, (int, np.integer)) and value >= 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    rng = keyed_rng(seed, "bootstrap", family, dataset)
    draws = rng.integers(0, n_clusters, size=(n_boot, n_clusters))
    flat = (draws + n_clusters * np.arange(n_boot)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n_clusters).reshape(n_boot, n_clusters)


def _check_counts(counts: np.ndarray) -> np.ndarray:
    m = np.asarray(counts)
    if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] == 0 or not np.issubdtype(m.dtype, np.integer) or m.min() < 0:
        raise ValueError("counts must be a non-empty 2-D matrix of non-negative ints (resamples x clusters)")
    return m


def per_cluster(cluster_ids: Sequence[int], values: Sequence[float], n_clusters: int) -> np.ndarray:
    """S_c = sum of the values of the units in cluster c (length n_clusters)."""
    ids, v = np.asarray(cluster_ids, dtype=int), np.asarray(values, dtype=float)
    if ids.ndim != 1 or ids.shape != v.shape:
        raise ValueError(f"need one cluster id per value, got {ids.shape} ids and {v.shape} values")
    if ids.size and (ids.min() < 0 or ids.max() >= n_clusters) or not np.all(np.isfinite(v)):
        raise ValueError(f"cluster ids must lie in [0, {n_clusters}) and values must be finite")
    return np.bincount(ids, weights=v, minlength=n_clusters)


def ratio_resamples(counts: np.ndarray, numer: np.ndarray, denom: np.ndarray) -> np.ndarray:
    """stat_b = sum_c m[b, c] numer_c / sum_c m[b, c] denom_c; NaN where the denominator is 0."""
    m = _check_counts(counts)
    top, bottom = m @ np.asarray(numer, dtype=float), m @ np.asarray(denom, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def percentile_ci(samples: Sequence[float], level: float = LEVEL) -> list[float] | None:
    """The ((1-level)/2, (1+level)/2) percentiles of the finite samples (numpy's linear rule); None if none."""
    s = np.asarray(samples, dtype=float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return None
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(s, [tail, 100.0 - tail])
    return [float(lo), float(hi)]


def mean_resamples(counts: np.ndarray, cluster_ids: Sequence[int], values: Sequence[float]) -> np.ndarray:
    """The mean of per-unit values on each resample: sum_c m[b, c] S_c / sum_c m[b, c] N_c.

    Units are groups (for accuracy: a group's mean correctness; for delta: its paired difference).
    """
    n = _check_counts(counts).shape[1]
    return ratio_resamples(counts, per_cluster(cluster_ids, values, n), per_cluster(cluster_ids, np.ones(len(values)), n))


def mean_ci(counts: np.ndarray, cluster_ids: Sequence[int], values: Sequence[float]) -> list[float] | None:
    """95% percentile interval of the mean of per-unit values under cluster resampling.

    >>> ci = mean_ci(np.array([[2, 0], [1, 1], [0, 2]]), [0, 0, 1], [1.0, 1.0, 0.0])  # resamples 1, 2/3, 0
    >>> [round(x, 4) for x in ci]
    [0.0333, 0.9833]
    """
    return percentile_ci(mean_resamples(counts, cluster_ids, values))


def mean_se(counts: np.ndarray, cluster_ids: Sequence[int], values: Sequence[float]) -> float | None:
    """The bootstrap standard error of the mean of per-unit values: the standard deviation (ddof 1) of
    its finite resample values; None with fewer than two.

    >>> mean_se(np.array([[2, 0], [1, 1], [0, 2]]), [0, 0, 1], [1.0, 1.0, 0.0])  # resamples 1, 2/3, 0
    0.5091750772173156
    """
    s = mean_resamples(counts, cluster_ids, values)
    s = s[np.isfinite(s)]
    return float(np.std(s, ddof=1)) if s.size >= 2 else None


def ece_resamples(
    counts: np.ndarray, cluster_ids: Sequence[int], confidences: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS
) -> np.ndarray:
    """ECE on each resample: sum_k |sum_c m[b, c] G_ck| / sum_c m[b, c] n_c, with G_ck = sum over
    the rows of cluster c in bin k of (correct - confidence) and n_c the rows of cluster c."""
    m = _check_counts(counts)
    n = m.shape[1]
    ok = np.asarray(correct, dtype=float)
    if ok.shape != (len(confidences),):
        raise ValueError(f"need one correctness flag per confidence, got {ok.shape} and {len(confidences)}")
    flat = np.asarray(cluster_ids, dtype=int) * n_bins + bin_indices(confidences, n_bins)
    gap = per_cluster(flat, ok - np.asarray(confidences, dtype=float), n * n_bins).reshape(n, n_bins)
    rows = per_cluster(cluster_ids, np.ones(ok.size), n)
    total = m @ rows
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, np.abs(m @ gap).sum(axis=1) / np.where(total > 0, total, 1.0), np.nan)


def ece_ci(
    counts: np.ndarray, cluster_ids: Sequence[int], confidences: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS
) -> list[float] | None:
    """95% percentile interval of the pooled ECE under cluster resampling (biased upward; see the reference)."""
    return percentile_ci(ece_resamples(counts, cluster_ids, confidences, correct, n_bins))
