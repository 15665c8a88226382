"""The ECE noise floor: the ECE a perfectly calibrated model would score on the same confidences.

On a finite sample ECE is biased upward, so a calibrated model scores above 0. The floor keeps
the sample's confidences c_i and redraws correctness as Bernoulli(c_i), ``sims`` times:

  plain      correct_i = [u_i < c_i], u_i ~ U(0, 1) independent per row;
  clustered  correct_i = [u_cluster(i) < c_i], one u per image cluster shared by its rows, so
             each row is still Bernoulli(c_i) but the errors of a cluster are fully correlated
             (a conservative bound; the truth lies between the two floors).

Each draw is scored with the same 15-bin ECE (``metrics.calibration.ece``); the floor is the
mean and the 95th percentile (numpy's linear interpolation) of those ECEs. The floor is a null
distribution for this sample size, not a confidence interval for the ECE (that is ``ece_ci``).
The draws come from ``keyed_rng(seed, "ece_floor", *key, "plain" | "clustered")``; the rows
are put in (cluster, confidence) order first, so the result does not depend on input order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from laya_robustness.metrics import rounded
from laya_robustness.metrics.calibration import ece
from laya_robustness.records import NO_PROBABILITIES, Record, generation_only
from laya_robustness.rng import keyed_rng

SIMS = 200
FLOOR_KEYS = ("ece", "floor_mean", "floor_p95", "clustered_mean", "clustered_p95", "ratio")


def _eces(confidences: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The ECE of each row of ``draws`` (uniforms, one per row of the sample) as correctness [u < c]."""
    return np.array([ece(confidences, u < confidences) for u in draws])


def _summary(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(np.percentile(values, 95))


def ece_floor(
    confidences: Sequence[float], clusters: Sequence[str], sims: int = SIMS, seed: int = 0, key: Sequence[Any] = ()
) -> dict[str, float]:
    """``{"floor_mean", "floor_p95", "clustered_mean", "clustered_p95"}`` of the ECE under calibrated redraws.

    >>> out = ece_floor([0.7] * 50, [f"c{i}" for i in range(50)], sims=50, seed=0)
    >>> 0 < out["floor_mean"] <= out["floor_p95"] < 1
    True
    """
    conf = np.asarray(confidences, dtype=float)
    if conf.ndim != 1 or conf.size == 0 or not np.all((conf >= 0) & (conf <= 1)):
        raise ValueError("confidences must be a non-empty flat sequence of numbers in [0, 1]")
    if len(clusters) != conf.size:
        raise ValueError(f"need one cluster per confidence, got {len(clusters)} for {conf.size}")
    if not (isinstance(sims, int) and not isinstance(sims, bool) and sims >= 1):
        raise ValueError(f"sims must be a positive int, got {sims!r}")
    order = sorted(range(conf.size), key=lambda i: (str(clusters[i]), conf[i]))
    conf = conf[order]
    index = {name: j for j, name in enumerate(sorted({str(c) for c in clusters}))}
    cluster_of = np.array([index[str(clusters[i])] for i in order])
    plain = keyed_rng(seed, "ece_floor", *key, "plain").random((sims, conf.size))
    shared = keyed_rng(seed, "ece_floor", *key, "clustered").random((sims, len(index)))[:, cluster_of]
    floor_mean, floor_p95 = _summary(_eces(conf, plain))
    clustered_mean, clustered_p95 = _summary(_eces(conf, shared))
    return {
        "floor_mean": floor_mean,
        "floor_p95": floor_p95,
        "clustered_mean": clustered_mean,
        "clustered_p95": clustered_p95,
    }


def floor_block(records: Iterable[Mapping[str, Any]], sims: int = SIMS, seed: int = 0) -> dict:
    """``{family: {dataset: {"ece", "floor_mean", "floor_p95", "clustered_mean", "clustered_p95", "ratio"}}}``.

    Per family and dataset, over the rows with a label and probabilities (label -1, open-answer rows and
    a generation-only scorer's rows left out): confidence =
    max(probs), correct = [argmax == label]; ratio = ece / floor_mean (None when the floor is 0). A cell of a
    generation-only scorer's rows holds None for each and ``probabilities``: why.
    The floor of a cell is keyed by (family, dataset). Floats rounded to 6 d.p.
    """
    cells: dict[tuple[str, str], list[tuple[str, str, float, bool]]] = defaultdict(list)
    unavailable: set[tuple[str, str]] = set()
    for i, r in enumerate(records):
        Record.parse(r, f"record {i}")
        if r["label"] >= 0 and r["probs"]:
            row = (r["row_id"], r["cluster"], max(r["probs"]), r["argmax"] == r["label"])
            cells[(r["family"], r["dataset"])].append(row)
        elif generation_only(r):  # no confidence to redraw from: the cell says so
            unavailable.add((r["family"], r["dataset"]))
    out: dict[str, dict[str, dict]] = {}
    for family, dataset in sorted(unavailable - set(cells)):
        out.setdefault(family, {})[dataset] = {**dict.fromkeys(FLOOR_KEYS), "probabilities": NO_PROBABILITIES}
    for (family, dataset), rows in sorted(cells.items()):
        rows.sort()
        conf = [c for _, _, c, _ in rows]
        measured = ece(conf, [ok for _, _, _, ok in rows])
        floor = ece_floor(conf, [cl for _, cl, _, _ in rows], sims=sims, seed=seed, key=(family, dataset))
        ratio = measured / floor["floor_mean"] if floor["floor_mean"] > 0 else None
        cell = {"ece": measured, **floor, "ratio": ratio}
        out.setdefault(family, {})[dataset] = rounded(cell)
    return out
