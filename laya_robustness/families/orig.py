"""orig: the unperturbed source rows, scored as they are; every other family is paired against them."""

from __future__ import annotations

from typing import Sequence

from laya_robustness.families import Family, declare
from laya_robustness.metrics.headline import ACC
from laya_robustness.records import ORIG
from laya_robustness.rows import Row


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """The source rows themselves (the seed is unused)."""
    return list(rows)


FAMILY = declare(Family(
    name=ORIG, row_wise=True, build=build, summary="the unperturbed rows", kind="orig", variants=(ORIG,),
    reads_pixels=False,
    headline=(ACC,), checks=("min_acc", "min_acc_over_chance", "max_ece"), title="orig", short="orig", table=("acc",),
))
