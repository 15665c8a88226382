"""option_order: the same options in another display order; the label stays in label order.

Variants per row: every non-identity cyclic shift, the reversal and one seeded
random permutation, de-duplicated (first name wins) and never the identity.
A two-option row therefore gets one variant (the swap).

Next to the flat cell's accuracy and flip rate, its cell has what VLMEvalKit users read:

- ``circular_acc`` (CircularEval as MMBench / VLMEvalKit define it): the share of source rows
  answered right under the original order and under each of its k-1 circular shifts (the variants
  ``shift1`` .. ``shift<k-1>``), circular_acc = (1/N) sum_g [orig_g right and shift_s,g right for
  every s], with its cluster-bootstrap ``circular_acc_ci``;
- ``all_orders_acc``: the stricter share right under every display order scored (the shifts, the
  reversal and the seeded permutation), with ``all_orders_acc_ci`` (the same resampled clusters);
  ``n_circular`` counts the source rows with a labelled orig row that both are over.
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
#: The variant name prefix of the circular shifts (``shift1`` .. ``shift<k-1>``), CircularEval's orders.
SHIFT = "shift"


def display_orders(k: int, rng_perm: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """Named display orders for ``k`` options: shifts, reversal, the given permutation; unique, no identity."""
    identity = tuple(range(k))
    candidates = [(f"{SHIFT}{s}", tuple((i + s) % k for i in range(k))) for s in range(1, k)]
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


def _circular_units(rows, orig) -> list[tuple[str, float, float]]:
    """One unit per source row with a labelled orig row: (its cluster, [orig and every circular shift are
    right], [orig and every display order are right])."""
    circular: dict = {}
    every: dict = {}
    for r in rows:
        g = group_key(r)
        if g in orig and orig[g]["label"] >= 0:
            ok = is_correct(r)
            every[g] = every.get(g, is_correct(orig[g])) and ok
            circular[g] = circular.get(g, is_correct(orig[g])) and (ok or not r["variant"].startswith(SHIFT))
    return [(orig[g]["cluster"], float(circular[g]), float(every[g])) for g in every]


def _gold_position(r) -> int:
    order = r.get("meta", {}).get("display_order") if r["family"] == FAMILY else None
    return list(order).index(r["label"]) if order else r["label"]


def _share_with_ci(units, position: int, clusters, counts) -> tuple[float | None, list | None]:
    if not units:
        return None, None
    values = [u[position] for u in units]
    return sum(values) / len(values), mean_ci(counts, [clusters[u[0]] for u in units], values)


def order_cell(rows, orig, boot) -> dict:
    """CircularEval and all-orders accuracy with their intervals, and accuracy by the gold option's displayed
    position."""
    units = _circular_units(rows, orig)
    clusters = cluster_index(u[0] for u in units)
    counts = resample_counts(boot["seed"], FAMILY + "/circular", rows[0]["dataset"], len(clusters), boot["n_boot"]) \
        if clusters else None
    circular, circular_ci = _share_with_ci(units, 1, clusters, counts)
    all_orders, all_orders_ci = _share_with_ci(units, 2, clusters, counts)
    scored = [r for r in [*rows, *(orig[g] for g in dict.fromkeys(group_key(r) for r in rows) if g in orig)]
              if r["label"] >= 0]
    by_position: dict[int, list[bool]] = {}
    for r in scored:
        by_position.setdefault(_gold_position(r), []).append(is_correct(r))
    return {
        "circular_acc": circular, "circular_acc_ci": circular_ci,
        "all_orders_acc": all_orders, "all_orders_acc_ci": all_orders_ci,
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
