"""The numbers behind the report's plots: reliability bins per family and accuracy / flip rate per perturbation strength.

Pure functions of prediction records (no plotting here, see ``report.plots``).

**Reliability** (per family, pooled over datasets, rows with a label): the rows are put in the
ECE's 15 equal-width bins of their confidence c = max prob (``metrics.calibration.bin_indices``);
each non-empty bin b gives n_b, conf_b = mean c and acc_b = mean [argmax == label], and
ECE = sum_b n_b / n * |acc_b - conf_b|.

**Strength** (one curve per family, op and parameter): a variant's strength is read from its rows'
``meta``: every numeric parameter of ``meta["image_op"]`` (``{"op": "jpeg", "quality": 40}`` gives
the axis ``jpeg quality``), and for a family declared with ``modality="visual"`` every numeric
top-level meta key. An axis is kept when each variant has one value of it (so a key copied from the
source rows is no axis) and the family's variants take at least two values.
Each point is (strength, dataset): the group-weighted accuracy and flip rate
(``metrics.headline.ACC`` / ``FLIP``) of the rows with that strength, as in the summary's variants.

>>> recs = [{"dataset": "d", "group_id": g, "cluster": g, "family": f, "variant": v, "label": 0,
...          "argmax": a, "probs": [0.9, 0.1], "logits": [1, 0], "meta": m}
...         for g in ("a", "b") for f, v, a, m in [
...             ("orig", "orig", 0, {}),
...             ("image", "q70", 0, {"image_op": {"op": "jpeg", "quality": 70}}),
...             ("image", "q20", 1 if g == "a" else 0, {"image_op": {"op": "jpeg", "quality": 20}})]]
>>> [(c.family, c.label, c.points["d"]) for c in strength_curves(recs)]
[('image', 'jpeg quality', [(20, 0.5, 0.5, 2), (70, 1.0, 0.0, 2)])]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from laya_robustness.answers import is_correct
from laya_robustness.families import declared
from laya_robustness.metrics.accuracy import orig_by_group
from laya_robustness.metrics.calibration import N_BINS, bin_indices
from laya_robustness.metrics.headline import ACC, FLIP, headline_values
from laya_robustness.records import ORIG

IMAGE_OP = "image_op"
VISUAL = "visual"


@dataclass(frozen=True)
class Reliability:
    """One family's reliability diagram: per non-empty bin (lower edge, n, mean confidence, accuracy)."""

    family: str
    n_rows: int
    ece: float
    bins: tuple[tuple[float, int, float, float], ...]


def family_order(names: Iterable[str]) -> list[str]:
    """Family names in declaration order (orig first), then undeclared ones sorted."""
    names = set(names)
    order = [f.name for f in declared() if f.name in names]
    return order + sorted(names - set(order))


def reliability(records: Sequence[Mapping[str, Any]], n_bins: int = N_BINS) -> list[Reliability]:
    """One Reliability per family with a labelled row, in declaration order (see the module doc)."""
    by_family: dict[str, list] = {}
    for r in records:
        if r["label"] >= 0 and r["probs"]:  # an open-answer row has no probabilities
            by_family.setdefault(r["family"], []).append(r)
    out = []
    for family in family_order(by_family):
        rows = by_family[family]
        conf = np.array([max(r["probs"]) for r in rows])
        ok = np.array([is_correct(r) for r in rows], dtype=float)
        idx = bin_indices(conf, n_bins)
        n = np.bincount(idx, minlength=n_bins)
        conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
        ok_sum = np.bincount(idx, weights=ok, minlength=n_bins)
        bins = tuple((b / n_bins, int(n[b]), float(conf_sum[b] / n[b]), float(ok_sum[b] / n[b]))
                     for b in range(n_bins) if n[b])
        ece = float(np.abs(ok_sum - conf_sum).sum() / len(rows))
        out.append(Reliability(family, len(rows), ece, bins))
    return out


@dataclass(frozen=True)
class StrengthCurve:
    """Accuracy and flip rate against one strength parameter of one family.

    ``points[dataset]`` is a list of (strength, acc, flip, n_rows) sorted by strength;
    ``orig_acc[dataset]`` the accuracy of the same groups' orig rows.
    """

    family: str
    op: str | None
    param: str
    points: Mapping[str, list[tuple[float, float | None, float | None, int]]]
    orig_acc: Mapping[str, float | None]

    @property
    def label(self) -> str:
        return f"{self.op} {self.param}" if self.op else self.param


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def strengths(record: Mapping[str, Any], visual: bool) -> list[tuple[str | None, str, float]]:
    """(op, parameter, value) of every numeric strength in the record's meta (see the module doc)."""
    meta = record.get("meta") or {}
    out = []
    op = meta.get(IMAGE_OP)
    if isinstance(op, Mapping) and isinstance(op.get("op"), str):
        out += [(op["op"], k, v) for k, v in sorted(op.items()) if k != "op" and _is_number(v)]
    if visual:
        out += [(None, k, v) for k, v in sorted(meta.items()) if _is_number(v)]
    return out


def strength_curves(records: Sequence[Mapping[str, Any]]) -> list[StrengthCurve]:
    """Every strength axis with at least two values, families in declaration order (see the module doc)."""
    visual = {f.name for f in declared() if f.modality == VISUAL}
    orig = orig_by_group(r for r in records if r["family"] == ORIG)
    axes: dict[tuple[str, str | None, str], dict[tuple[str, float], list]] = {}
    per_variant: dict[tuple[str, str | None, str], dict[str, set]] = {}
    for r in records:
        if r["family"] == ORIG:
            continue
        for op, param, value in strengths(r, r["family"] in visual):
            axis = (r["family"], op, param)
            axes.setdefault(axis, {}).setdefault((r["dataset"], value), []).append(r)
            per_variant.setdefault(axis, {}).setdefault(r["variant"], set()).add(value)
    out = []
    rank = {f: i for i, f in enumerate(family_order({k[0] for k in axes}))}
    for (family, op, param), cells in sorted(axes.items(), key=lambda kv: (rank[kv[0][0]], str(kv[0][1]), kv[0][2])):
        one_each = all(len(values) == 1 for values in per_variant[(family, op, param)].values())
        if not one_each or len({value for _, value in cells}) < 2:
            continue
        points: dict[str, list] = {}
        for (dataset, value), rows in sorted(cells.items()):
            stats = headline_values((ACC, FLIP), rows, orig)
            points.setdefault(dataset, []).append((value, stats["acc"], stats["flip"], len(rows)))
        orig_acc = {}
        for dataset in points:
            groups = {(r["dataset"], r["group_id"]) for (d, _), rows in cells.items() if d == dataset for r in rows}
            orig_acc[dataset] = headline_values((ACC,), [orig[g] for g in sorted(groups) if g in orig], orig)["acc"]
        out.append(StrengthCurve(family, op, param, points, orig_acc))
    return out
