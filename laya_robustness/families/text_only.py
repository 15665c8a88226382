"""text_only: the question without its images.

Variant ``no_image``, one per row with images: ``images=()``, everything else (the text
context included) kept. Rows without images get none.
"""

from __future__ import annotations

from typing import Sequence

from laya_robustness.families import Family, declare
from laya_robustness.rows import Row

FAMILY = "text_only"
VARIANT = "no_image"


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images, with the images removed (the seed is unused)."""
    return [row.derive(FAMILY, VARIANT, images=()) for row in rows if row.images]


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="control", variants=(VARIANT,), checks=("min_gap",),
    reads_pixels=False,
    summary="no image, the text context kept", title="no image", short="no image", table=("acc", "delta"),
))
