"""Mutual information of discrete variables, its chance-adjusted estimate, and the stability study's
conditional mutual information ratio I(H_V; H_T | C) / I(H_V; H_T) with a bootstrap interval (Sec. 5.2.1).

**Plug-in** (the empirical probabilities of n samples; nats):

    I(X; Y) = sum_{x,y} p(x,y) ln(p(x,y) / (p(x) p(y))),    I(X; Y | Z) = sum_z p(z) I(X; Y | Z = z)

It is biased upward by about (m_x - 1)(m_y - 1) / 2n per table of m_x by m_y levels, and the conditional
term pays that once per stratum of Z on n p(z) samples: with the study's 10 bins per variable over 240
samples, I(X; Y | Z) carries about 10 * 81 / 480 = 1.7 nats of bias, more than any dependence it measures.

**Chance-adjusted** (the estimate used here): the plug-in value less its expectation when Y is randomly
permuted against X, within each stratum of Z for the conditional term,

    I_adj(X; Y) = I(X; Y) - E_0[I(X; Y)],    I_adj(X; Y | Z) = sum_z p(z) (I(X; Y | Z = z) - E_0[I(X; Y | Z = z)])

where, given the margins a_x, b_y of a table of n samples, each cell count is hypergeometric under the
permutation and (Vinh, Epps and Bailey 2010, the expected mutual information of adjusted MI)

    E_0[I] = sum_{x,y} sum_k P_hyp(k; n, a_x, b_y) (k / n) ln(n k / (a_x b_y)).

The adjustment is exact under independence, and to first order under dependence when every cell has a
positive probability (the plug-in bias, (m_xy - m_x - m_y + 1) / 2n, is then the null's). No random
numbers are drawn for it; the sum over k is taken within 8 standard deviations (+ 8) of its mean.

**Levels.** Each variable is cut into L levels (:func:`discretize`): a variable with at most L distinct
values keeps them, any other gets L equal-frequency bins. L defaults to :func:`auto_levels`, the most
levels that leave at least 8 samples per cell of the three-way table on average: 3 at 240 samples, 9 at
7,600 (the study's 10 needs 8,000).

**Interval.** B bootstrap resamples of the samples (``keyed_rng(seed, *keys)``) each give theta* (I_adj,
I_adj given Z, and their ratio). A resample is drawn from the sample itself, whose own value is the
sample's plug-in value theta_plug, so the basic (pivotal) interval is

    [theta - (q_{0.975}(theta*) - theta_plug),  theta - (q_{0.025}(theta*) - theta_plug)],

cut at 0 from below (the true MI, CMI and ratio are >= 0).

**Readable.** The ratio is read only when the sample has at least 8 samples per cell on average (else no
interval is drawn) and the interval of I_adj(X; Y) lies above 0 (without a dependence to explain, the
ratio's denominator is noise). Otherwise ``readable`` is False, ``unreadable`` says why and the ratio has
no interval.

>>> round(mutual_information([0, 0, 1, 1], [0, 0, 1, 1]), 4)  # = H(X) = ln 2
0.6931
>>> round(adjusted_mutual_information([0, 0, 1, 1], [0, 0, 1, 1]), 4)  # ln 2 - E_0 = ln 2 - ln 2 / 3
0.4621
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

import numpy as np

from laya_robustness.rng import keyed_rng

BINNINGS = ("quantile", "width")
#: Samples per cell of the (X, Y, Z) table, on average, that :func:`auto_levels` keeps and a readable ratio needs.
MIN_PER_CELL = 8
#: The most levels :func:`auto_levels` gives (the study's bin count).
MAX_LEVELS = 10
#: Bootstrap resamples of the ratio's interval, and its level.
N_BOOT = 400
LEVEL = 0.95
_WINDOW_SD, _WINDOW_PAD = 8.0, 8
_CHUNK = 1 << 20  # hypergeometric terms evaluated at once


def discretize(values: Sequence[float], n_bins: int, binning: str = "quantile") -> np.ndarray:
    """Level index in [0, n_bins) of every value.

    A variable with at most ``n_bins`` distinct values keeps them as its levels (in increasing order).
    Otherwise, ``quantile`` (equal frequency): edges q_j = the j/n_bins quantiles of the values (numpy's
    linear rule), j = 1..n_bins-1, duplicates dropped; bin = #{edges < x}, so bins are right-closed
    (-inf, q_1], (q_1, q_2], ..., equal values always share a bin, and an atom (H = 0 for most samples)
    gets one bin while the rest is split into equally filled ones. ``width``: n_bins equal intervals of
    [min, max], bin = min(floor((x - min) / w), n_bins - 1).

    >>> discretize([0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5], 5).tolist()
    [0, 0, 0, 0, 0, 0, 1, 2, 2, 3, 3]
    >>> discretize([0.0, 0.5, 1.0, 0.9], 2, "width").tolist()
    [0, 1, 1, 1]
    >>> discretize([0.7, 0.0, 0.7, 0.2], 3).tolist()  # three values, three levels: kept
    [2, 0, 2, 1]
    """
    if not (isinstance(n_bins, int) and n_bins >= 1):
        raise ValueError(f"n_bins must be an int >= 1, got {n_bins!r}")
    if binning not in BINNINGS:
        raise ValueError(f"binning must be one of {', '.join(BINNINGS)}, got {binning!r}")
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("need a non-empty 1-D sequence of finite numbers")
    distinct, codes = np.unique(x, return_inverse=True)
    if distinct.size <= n_bins:
        return codes.ravel()
    if binning == "quantile":
        edges = np.unique(np.quantile(x, np.arange(1, n_bins) / n_bins))
        return np.searchsorted(edges, x, side="left")
    lo, hi = float(x.min()), float(x.max())
    return np.minimum(np.floor((x - lo) / ((hi - lo) / n_bins)).astype(int), n_bins - 1)


def auto_levels(n: int) -> int:
    """L = floor((n / MIN_PER_CELL)^(1/3)), within [2, MAX_LEVELS]: about MIN_PER_CELL samples per cell of an
    L x L x L table.

    >>> auto_levels(240), auto_levels(7600), auto_levels(10 ** 6)
    (3, 9, 10)
    """
    levels = int(math.floor((n / MIN_PER_CELL) ** (1 / 3) + 1e-9))
    return max(2, min(MAX_LEVELS, levels))


def _codes(labels: Sequence[Hashable]) -> np.ndarray:
    return np.unique(np.asarray(labels), return_inverse=True)[1].ravel()


def _table(x: np.ndarray, y: np.ndarray, z: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Counts of (z, x, y) for every row of the code arrays (..., n): shape (..., m_z, m_x, m_y)."""
    mz, mx, my = shape
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if lead else 1
    offset = (np.arange(rows).reshape(lead + (1,)) if lead else 0) * (mz * mx * my)
    flat = np.bincount((offset + (z * mx + x) * my + y).ravel(), minlength=rows * mz * mx * my)
    return flat.reshape(lead + (mz, mx, my)).astype(float)


def _plugin(counts: np.ndarray) -> np.ndarray:
    """The plug-in I (nats) of each table of counts (..., m_x, m_y); 0 for an empty table."""
    n = counts.sum(axis=(-1, -2), keepdims=True)
    a, b = counts.sum(axis=-1, keepdims=True), counts.sum(axis=-2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(counts > 0, counts * np.log(counts * n / (a * b)), 0.0)
    total = n[..., 0, 0]
    return np.divide(terms.sum(axis=(-1, -2)), total, out=np.zeros_like(total), where=total > 0)


def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])


def _expected(counts: np.ndarray) -> np.ndarray:
    """E_0[I] of each table of counts (..., m_x, m_y) given its margins (see the module doc)."""
    n = counts.sum(axis=(-1, -2), keepdims=True)
    a, b, n = np.broadcast_arrays(counts.sum(axis=-1, keepdims=True), counts.sum(axis=-2, keepdims=True), n)
    a, b, n = (v.reshape(-1).astype(np.int64) for v in (a, b, n))
    out = np.zeros(a.size)
    live = np.flatnonzero((a > 0) & (b > 0))
    if live.size:
        out[live] = _expected_cells(a[live], b[live], n[live])
    return out.reshape(counts.shape).sum(axis=(-1, -2))


def _expected_cells(a: np.ndarray, b: np.ndarray, n: np.ndarray) -> np.ndarray:
    """sum_k P_hyp(k; n, a, b) (k / n) ln(n k / (a b)) for each cell (a, b > 0)."""
    lf = _log_factorials(int(n.max()))
    mean = a * b / n
    sd = np.sqrt(mean * (1 - a / n) * (n - b) / np.maximum(n - 1, 1))
    lo = np.maximum(np.maximum(0, a + b - n), np.floor(mean - _WINDOW_SD * sd - _WINDOW_PAD)).astype(np.int64)
    hi = np.minimum(np.minimum(a, b), np.ceil(mean + _WINDOW_SD * sd + _WINDOW_PAD)).astype(np.int64)
    out = np.empty(a.size)
    by_width = np.argsort(hi - lo, kind="stable")  # cells of similar width share a chunk
    widths = (hi - lo)[by_width] + 1
    start = 0
    while start < a.size:  # a chunk: as many cells as keep cells x their widest window under _CHUNK terms
        stop = start + max(1, int(np.searchsorted(np.arange(1, a.size - start + 1) * widths[start:], _CHUNK, "right")))
        width = int(widths[stop - 1])
        cells = by_width[start:stop]
        ca, cb, cn, clo, chi = (v[cells, None] for v in (a, b, n, lo, hi))
        k = clo + np.arange(width)
        inside = k <= chi
        k = np.where(inside, k, clo)
        log_p = (lf[ca] + lf[cn - ca] + lf[cb] + lf[cn - cb] - lf[cn]) \
            - (lf[k] + lf[ca - k] + lf[cb - k] + lf[cn - ca - cb + k])
        log_ratio = np.log(np.maximum(k, 1)) + np.log(cn / (ca * cb))
        terms = np.where(inside & (k > 0), np.exp(log_p) * k * log_ratio, 0.0)
        out[cells] = terms.sum(axis=1) / cn[:, 0]
        start = stop
    return out


def _pair(x: Sequence[Hashable], y: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
    cx, cy = _codes(x), _codes(y)
    if cx.shape != cy.shape or cx.size == 0:
        raise ValueError(f"need two non-empty label sequences of one length, got {cx.size} and {cy.size}")
    return cx, cy


def mutual_information(x: Sequence[Hashable], y: Sequence[Hashable]) -> float:
    """The plug-in I(X; Y) of two discrete variables (module doc), nats.

    >>> mutual_information([0, 1, 0, 1], [0, 0, 1, 1])
    0.0
    """
    cx, cy = _pair(x, y)
    table = _table(cx, cy, np.zeros_like(cx), (1, cx.max() + 1, cy.max() + 1))[0]
    return max(0.0, float(_plugin(table)))


def adjusted_mutual_information(x: Sequence[Hashable], y: Sequence[Hashable]) -> float:
    """I_adj(X; Y) = I(X; Y) - E_0[I(X; Y)] (module doc), nats; about 0 without dependence, can be negative.

    Not scikit-learn's ``adjusted_mutual_info_score``, which also divides by a normalisation.
    """
    cx, cy = _pair(x, y)
    table = _table(cx, cy, np.zeros_like(cx), (1, cx.max() + 1, cy.max() + 1))[0]
    return float(_plugin(table) - _expected(table))


def _triple(x, y, z) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int, int]]:
    cx, cy = _pair(x, y)
    cz = _codes(z)
    if cz.shape != cx.shape:
        raise ValueError(f"need three label sequences of one length, got {cx.size}, {cy.size}, {cz.size}")
    return cx, cy, cz, (int(cz.max()) + 1, int(cx.max()) + 1, int(cy.max()) + 1)


def conditional_mutual_information(x: Sequence[Hashable], y: Sequence[Hashable], z: Sequence[Hashable]) -> float:
    """The plug-in I(X; Y | Z) = sum_z p(z) I(X; Y | Z = z) (module doc), nats.

    >>> conditional_mutual_information([0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1])  # Z explains everything
    0.0
    """
    cx, cy, cz, shape = _triple(x, y, z)
    table = _table(cx, cy, cz, shape)
    return float(np.sum(table.sum(axis=(-1, -2)) * _plugin(table)) / cx.size)


def adjusted_conditional_mutual_information(x: Sequence[Hashable], y: Sequence[Hashable],
                                            z: Sequence[Hashable]) -> float:
    """I_adj(X; Y | Z) = sum_z p(z) (I(X; Y | Z = z) - E_0[I(X; Y | Z = z)]) (module doc), nats."""
    cx, cy, cz, shape = _triple(x, y, z)
    table = _table(cx, cy, cz, shape)
    return float(np.sum(table.sum(axis=(-1, -2)) * (_plugin(table) - _expected(table))) / cx.size)


def _estimates(tables: np.ndarray) -> dict[str, np.ndarray]:
    """Plug-in and adjusted I(X;Y) and I(X;Y|Z) of each three-way table (..., m_z, m_x, m_y)."""
    n_z = tables.sum(axis=(-1, -2))
    n = n_z.sum(axis=-1)
    marginal = tables.sum(axis=-3)
    mi, cmi = _plugin(marginal), (n_z * _plugin(tables)).sum(axis=-1) / n
    return {"mi_plugin": mi, "cmi_plugin": cmi, "mi": mi - _expected(marginal),
            "cmi": cmi - (n_z * _expected(tables)).sum(axis=-1) / n}


def _ratio(cmi, mi):
    return np.divide(cmi, mi, out=np.full(np.shape(mi), np.nan), where=np.asarray(mi) > 1e-12)


def _pivotal(estimate: float, plugin: float, replicates: np.ndarray) -> list[float] | None:
    """The basic bootstrap interval, intersected with [0, inf) where the true values lie."""
    if not np.all(np.isfinite(replicates)):  # a resample without dependence: the ratio is unbounded
        return None
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(replicates, [tail, 1 - tail])
    return [max(0.0, float(estimate - (hi - plugin))), max(0.0, float(estimate - (lo - plugin)))]


def _too_few(n: int, levels: int) -> str | None:
    if n >= MIN_PER_CELL * levels ** 3:
        return None
    return (f"{n} samples are too few for {levels} levels per variable (fewer than {MIN_PER_CELL} per cell of the "
            f"{levels}x{levels}x{levels} table on average; {MIN_PER_CELL * levels ** 3} needed)")


def _no_dependence(n: int, mi_ci: list[float]) -> str | None:
    if mi_ci[0] > 0.0:
        return None
    return (f"I(H_V; H_T) is not distinguishable from 0 on {n} samples (its {LEVEL:.0%} interval "
            f"[{mi_ci[0]:.4f}, {mi_ci[1]:.4f}] reaches 0): there is no dependence for the confidence to explain")


def cmi_ratio(x: Sequence[float], y: Sequence[float], z: Sequence[float], *, levels: int | None = None,
              binning: str = "quantile", n_boot: int = N_BOOT, seed: int = 0, keys: Sequence[object] = ()) -> dict:
    """I_adj(X; Y | Z) / I_adj(X; Y) with each variable cut into ``levels`` levels (None: :func:`auto_levels`),
    its plug-in form and the pivotal bootstrap intervals drawn with ``keyed_rng(seed, "cmi", *keys)``.

    Returns ``levels``, ``n_samples``, ``mi``, ``cmi``, ``ratio`` (adjusted), ``mi_ci``, ``cmi_ci``,
    ``ratio_ci``, ``plugin`` ({mi, cmi, ratio}), ``readable`` and ``unreadable`` (why not, or None). A ratio
    is None when I_adj(X; Y) <= 0; ``ratio_ci`` is None unless the ratio is readable.
    """
    if not (isinstance(n_boot, int) and n_boot >= 10):
        raise ValueError(f"n_boot must be an int >= 10, got {n_boot!r}")
    n = len(x)
    levels = auto_levels(n) if levels is None else levels
    cx, cy, cz, shape = _triple(*(discretize(v, levels, binning) for v in (x, y, z)))
    point = {k: float(v) for k, v in _estimates(_table(cx, cy, cz, shape)).items()}
    ratio, ratio_plugin = (float(_ratio(point[c], point[m])) for c, m in (("cmi", "mi"), ("cmi_plugin", "mi_plugin")))
    mi_ci = cmi_ci = ratio_ci = None
    why = _too_few(n, levels)
    if why is None:  # the intervals (a sample too small for its levels gets none)
        picks = keyed_rng(seed, "cmi", *keys).integers(0, n, size=(n_boot, n))
        boot = _estimates(_table(cx[picks], cy[picks], cz[picks], shape))
        mi_ci = _pivotal(point["mi"], point["mi_plugin"], boot["mi"])
        cmi_ci = _pivotal(point["cmi"], point["cmi_plugin"], boot["cmi"])
        why = _no_dependence(n, mi_ci)
        ratio_ci = None if why else _pivotal(ratio, ratio_plugin, _ratio(boot["cmi"], boot["mi"]))
        if why is None and ratio_ci is None:
            why = f"I(H_V; H_T) vanishes in some resamples of the {n} samples: the ratio's interval is unbounded"
    finite = lambda v: None if math.isnan(v) else v  # noqa: E731
    return {"levels": levels, "n_samples": n, "mi": point["mi"], "cmi": point["cmi"], "ratio": finite(ratio),
            "mi_ci": mi_ci, "cmi_ci": cmi_ci, "ratio_ci": ratio_ci,
            "plugin": {"mi": point["mi_plugin"], "cmi": point["cmi_plugin"], "ratio": finite(ratio_plugin)},
            "readable": why is None, "unreadable": why}
