"""shift: the same question on the image rolled sideways by a few pixels (a cyclic horizontal shift).

Variants, n in (-16, -12, -8, -4, 4, 8, 12, 16) pixels (the reference's horizontal translation):
``shift_m16`` ... ``shift_m4`` (n < 0: the content moves left) and ``shift_p4`` ... ``shift_p16``
(n > 0: it moves right). Every image of a row is rolled along x with ``numpy.roll(pixels, n,
axis=1)``: the columns that leave one side come back in on the other, so no pixel is lost or made
up and the size is kept. An image narrower than |n| is rolled by n modulo its width (a full turn
returns the image itself). Rows without images get none. ``meta["image_op"]`` holds
``{"op": "shift", "dx": n, "cyclic": True}``; the source meta keys are kept.

>>> from PIL import Image
>>> image = Image.fromarray(np.array([[[0] * 3, [1] * 3, [2] * 3, [3] * 3]], dtype=np.uint8))  # 4 x 1 px
>>> np.asarray(shift_image(image, 1))[0, :, 0].tolist(), np.asarray(shift_image(image, -1))[0, :, 0].tolist()
([3, 0, 1, 2], [1, 2, 3, 0])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from laya_robustness.families import Family, declare
from laya_robustness.metrics.stability import AV, V, stability_cell
from laya_robustness.rows import Row

FAMILY = "shift"
OFFSETS = (-16, -12, -8, -4, 4, 8, 12, 16)


def variant_name(n: int) -> str:
    """``shift_m16`` for n = -16, ``shift_p4`` for n = 4."""
    return f"shift_{'m' if n < 0 else 'p'}{abs(n)}"


VARIANTS = {variant_name(n): n for n in OFFSETS}


def shift_image(image: Image.Image, n: int) -> Image.Image:
    """The RGB image rolled n pixels to the right (left when n < 0), cyclically."""
    return Image.fromarray(np.roll(np.asarray(image.convert("RGB")), n, axis=1), "RGB")


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images, rolled by each of the eight offsets (no randomness: ``seed`` is unused)."""
    out = []
    for row in rows:
        if not row.images:
            continue
        pixels = [np.asarray(im.convert("RGB")) for im in row.images]
        for name, n in VARIANTS.items():
            images = tuple(Image.fromarray(np.roll(p, n, axis=1), "RGB") for p in pixels)
            meta = {**row.meta, "image_op": {"op": "shift", "dx": n, "cyclic": True}}
            out.append(row.derive(FAMILY, name, images=images, meta=meta))
    return out


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="invariance", modality="visual", block="stability", variants=tuple(VARIANTS),
    meta_keys={"*": ("image_op",)}, headline=(AV, V), checks=("max_av", "max_v"), cell=stability_cell,
    summary="cyclic horizontal shift by -16..16 px (numpy roll)", title="shift", short="shift",
))
