"""pad_crop: the same question on the image with a black border added, or a margin cut off.

Variants, n in (-16, -12, -8, -4, 4, 8, 12, 16) pixels (the reference's padding / cropping):

- ``pad4`` ... ``pad16`` (n > 0): n black pixels (0, 0, 0) added on all four sides; a w x h
  image becomes (w + 2n) x (h + 2n).
- ``crop4`` ... ``crop16`` (n < 0): |n| pixels cut from all four sides around the centre (the box
  ``(|n|, |n|, w - |n|, h - |n|)``); a w x h image becomes (w - 2|n|) x (h - 2|n|).

A crop that would leave nothing (2|n| >= w or 2|n| >= h for any image of the row) is skipped: that
row gets no row of that variant (a 64 px image keeps 32 px under ``crop16``, so it gets all eight).
Rows without images get none. ``meta["image_op"]`` holds ``{"op": "pad", "n": n, "fill": [0, 0, 0]}``
or ``{"op": "crop", "n": n, "boxes": [[left, top, right, bottom] per image]}``; the source meta
keys are kept.

>>> from PIL import Image
>>> image = Image.new("RGB", (6, 4), (9, 9, 9))
>>> pad_image(image, 2).size, crop_image(image, 1).size, crop_box(image.size, 2)
((10, 8), (4, 2), None)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from laya_robustness.families import Family, declare
from laya_robustness.metrics.stability import AV, V, stability_cell
from laya_robustness.rows import Row

FAMILY = "pad_crop"
AMOUNTS = (-16, -12, -8, -4, 4, 8, 12, 16)
FILL = (0, 0, 0)


def variant_name(n: int) -> str:
    """``crop16`` for n = -16, ``pad4`` for n = 4."""
    return f"{'crop' if n < 0 else 'pad'}{abs(n)}"


VARIANTS = {variant_name(n): n for n in AMOUNTS}


def crop_box(size: tuple[int, int], m: int) -> tuple[int, int, int, int] | None:
    """The box cutting ``m`` pixels from every side of a ``size`` image; None when nothing would be left."""
    w, h = size
    if 2 * m >= w or 2 * m >= h:
        return None
    return (m, m, w - m, h - m)


def pad_image(image: Image.Image, n: int) -> Image.Image:
    """The RGB image with ``n`` black pixels added on every side."""
    pixels = np.asarray(image.convert("RGB"))
    return Image.fromarray(np.pad(pixels, ((n, n), (n, n), (0, 0)), constant_values=0), "RGB")


def crop_image(image: Image.Image, m: int) -> Image.Image:
    """The RGB image without ``m`` pixels on every side (ValueError when nothing would be left)."""
    box = crop_box(image.size, m)
    if box is None:
        raise ValueError(f"cropping {m} px from every side of a {image.size[0]}x{image.size[1]} image leaves nothing")
    return image.convert("RGB").crop(box)


def _variant(row: Row, name: str, n: int) -> Row | None:
    if n > 0:
        images = tuple(pad_image(im, n) for im in row.images)
        op = {"op": "pad", "n": n, "fill": list(FILL)}
    else:
        boxes = [crop_box(im.size, -n) for im in row.images]
        if None in boxes:
            return None
        images = tuple(im.convert("RGB").crop(box) for im, box in zip(row.images, boxes))
        op = {"op": "crop", "n": n, "boxes": [list(b) for b in boxes]}
    return row.derive(FAMILY, name, images=images, meta={**row.meta, "image_op": op})


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images, padded and cropped by each amount (no randomness: ``seed`` is unused)."""
    out = []
    for row in rows:
        if row.images:
            out.extend(v for name, n in VARIANTS.items() if (v := _variant(row, name, n)) is not None)
    return out


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="invariance", modality="visual", block="stability", variants=tuple(VARIANTS),
    meta_keys={"*": ("image_op",)}, headline=(AV, V), checks=("max_av", "max_v"), cell=stability_cell,
    summary="4-16 px black padding on every side, or 4-16 px cropped from every side", title="pad/crop",
    short="pad/crop",
))
