"""option_order: the same options in another display order; the label stays in label order.

Variants per row: every non-identity cyclic shift, the reversal and one seeded
random permutation, de-duplicated (first name wins) and never the identity.
A two-option row therefore gets one variant (the swap).

Next to the flat cell's accuracy and flip rate, its cell has what VLMEvalKit users read:

- ``circular_acc`` (CircularEval): the share of source rows answered right under the original
  order and under every one of their display orders, with its cluster-bootstrap ``circular_acc_ci``;
  ``n_circular`` counts the source rows with an orig row.
- ``acc_by_position``: accuracy of the rows (orig and every order) by the gold option's displayed
  position (0 is first), with ``n_by_position``: a model with a position prior is not flat here.
"""

from __future__ import annotations

from typing import Sequence

from laya_robustness.answers import is_correct
from laya_robustness.families import Family, declare
from laya_robustness.metrics.accuracy import group_key
from laya_robustness.metrics.bootstrap import cluster_index, mean_ci, resample_counts
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

FAMILY = "option_order"


def display_orders(k: int, rng_perm: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """Named display orders for ``k`` options: shifts, reversal, the given permutation; unique, no identity."""
    identity = tuple(range(k))
    candidates = [(f"shift{s}", tuple((i + s) % k for i in range(k))) for s in range(1, k)]
    candidates.append(("reverse", tuple(reversed(identity))))
    candidates.append(("random", tuple(int(i) for i in rng_perm)))
    seen = {identity}
    unique = []
    for name, order in candidates:
        if order not in seen:
            seen.add(order)
            unique.append((name, order))
    return unique


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row under each of its distinct non-identity display orders."""
    out = []
    for row in rows:
        k = len(row.options)
        perm = keyed_rng(seed, FAMILY, row.row_id).permutation(k)
        for name, order in display_orders(k, perm):
            out.append(row.derive(FAMILY, name, display_order=order, meta={**row.meta, "display_order": list(order)}))
    return out


def _circular_units(rows, orig):
    """One unit per source row with an orig row: [the orig row and every reordered row are right]."""
    right: dict = {}
    for r in rows:
        g = group_key(r)
        if g in orig and orig[g]["label"] >= 0:
            right[g] = right.get(g, is_correct(orig[g])) and is_correct(r)
    return [(orig[g]["cluster"], float(ok)) for g, ok in right.items()]


def _gold_position(r) -> int:
    order = r.get("meta", {}).get("display_order") if r["family"] == FAMILY else None
    return list(order).index(r["label"]) if order else r["label"]


def order_cell(rows, orig, boot) -> dict:
    """CircularEval accuracy with its interval, and accuracy by the gold option's displayed position."""
    units = _circular_units(rows, orig)
    clusters = cluster_index(c for c, _ in units)
    counts = resample_counts(boot["seed"], FAMILY + "/circular", rows[0]["dataset"], len(clusters), boot["n_boot"]) \
        if clusters else None
    scored = [r for r in [*rows, *(orig[g] for g in dict.fromkeys(group_key(r) for r in rows) if g in orig)]
              if r["label"] >= 0]
    by_position: dict[int, list[bool]] = {}
    for r in scored:
        by_position.setdefault(_gold_position(r), []).append(is_correct(r))
    return {
        "circular_acc": sum(v for _, v in units) / len(units) if units else None,
        "circular_acc_ci": mean_ci(counts, [clusters[c] for c, _ in units], [v for _, v in units]) if units else None,
        "n_circular": len(units),
        "acc_by_position": {str(p): sum(v) / len(v) for p, v in sorted(by_position.items())},
        "n_by_position": {str(p): len(v) for p, v in sorted(by_position.items())},
    }


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="invariance", variants=("shift*", "reverse", "random"),
    reads_pixels=False,
    meta_keys={"*": ("display_order",)}, checks=("max_flip", "max_drop", "min_acc", "max_ece"),
    summary="every cyclic shift, the reversal, one seeded permutation (de-duplicated)",
    title="option order", short="order", cell=order_cell,
))
