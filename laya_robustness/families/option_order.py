"""option_order: the same options in another display order; the label stays in label order.

Variants per row: every non-identity cyclic shift, the reversal and one seeded
random permutation, de-duplicated (first name wins) and never the identity.
A two-option row therefore gets one variant (the swap).
"""

from __future__ import annotations

from typing import Sequence

from laya_robustness.families import Family, declare
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


declare(Family(
    name=FAMILY, build=build, kind="invariance", variants=("shift*", "reverse", "random"),
    meta_keys={"*": ("display_order",)}, checks=("max_flip", "max_drop", "min_acc", "max_ece"),
    summary="every cyclic shift, the reversal, one seeded permutation (de-duplicated)",
    title="option order", short="order",
))
