"""scale and scale_pad: the same question on the image made 10% smaller, alone or on a canvas of its old size.

- scale, variant ``scale90``: every image resized to (round(0.9 w), round(0.9 h)) (at least 1 px)
  with PIL's bicubic filter; it stays smaller.
- scale_pad, variants ``scale90_pad_black`` / ``scale90_pad_white``: the same resized image
  pasted on a w x h canvas of black (0, 0, 0) or white (255, 255, 255), its top-left corner at
  ((w - w') // 2, (h - h') // 2), so the size is the original one (the reference's padded scaling,
  which rules out the effect of the size change alone).

Rows without images get none. ``meta["image_op"]`` holds ``{"op": "scale", "factor": 0.9,
"resample": "bicubic"}`` (plus ``"fill"`` and ``"offsets"``, one ``[x, y]`` per image, for
scale_pad); the source meta keys are kept.

>>> from PIL import Image
>>> image = Image.new("RGB", (64, 30), (200, 0, 0))
>>> scaled_size(image.size), padded(image, (255, 255, 255))[0].size, padded(image, (0, 0, 0))[1]
((58, 27), (64, 30), (3, 1))
"""

from __future__ import annotations

from typing import Sequence

from PIL import Image

from laya_robustness.families import Family, declare
from laya_robustness.metrics.stability import AV, V, stability_cell
from laya_robustness.rows import Row

SCALE = "scale"
SCALE_PAD = "scale_pad"
FACTOR = 0.9
FILLS = {"scale90_pad_black": (0, 0, 0), "scale90_pad_white": (255, 255, 255)}
OP = {"op": "scale", "factor": FACTOR, "resample": "bicubic"}


def scaled_size(size: tuple[int, int], factor: float = FACTOR) -> tuple[int, int]:
    """(round(factor w), round(factor h)), each at least 1."""
    return tuple(max(1, round(s * factor)) for s in size)


def scale_image(image: Image.Image, factor: float = FACTOR) -> Image.Image:
    """The RGB image resized by ``factor`` with the bicubic filter."""
    image = image.convert("RGB")
    return image.resize(scaled_size(image.size, factor), Image.Resampling.BICUBIC)


def pad_to(small: Image.Image, size: tuple[int, int], fill: tuple[int, int, int]) -> tuple[Image.Image, tuple[int, int]]:
    """``small`` centred on a ``size`` canvas filled with ``fill``, and the offset of its top-left corner."""
    w, h = size
    offset = ((w - small.size[0]) // 2, (h - small.size[1]) // 2)
    canvas = Image.new("RGB", (w, h), fill)
    canvas.paste(small, offset)
    return canvas, offset


def padded(image: Image.Image, fill: tuple[int, int, int], factor: float = FACTOR) -> tuple[Image.Image, tuple[int, int]]:
    """The scaled image centred on a canvas of the original size filled with ``fill``, and its offset."""
    return pad_to(scale_image(image, factor), image.size, fill)


def build_scale(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images, scaled by 0.9 (no randomness: ``seed`` is unused)."""
    return [row.derive(SCALE, "scale90", images=tuple(scale_image(im) for im in row.images),
                       meta={**row.meta, "image_op": dict(OP)}) for row in rows if row.images]


def build_scale_pad(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images, scaled by 0.9 and padded back to size in black and in white."""
    out = []
    for row in rows:
        if not row.images:
            continue
        small = [scale_image(im) for im in row.images]
        for name, fill in FILLS.items():
            placed = [pad_to(sm, im.size, fill) for im, sm in zip(row.images, small)]
            op = {**OP, "fill": list(fill), "offsets": [list(offset) for _, offset in placed]}
            images = tuple(canvas for canvas, _ in placed)
            out.append(row.derive(SCALE_PAD, name, images=images, meta={**row.meta, "image_op": op}))
    return out


declare(Family(
    name=SCALE, row_wise=True, build=build_scale, kind="invariance", modality="visual", block="stability", variants=("scale90",),
    meta_keys={"*": ("image_op",)}, headline=(AV, V), checks=("max_av", "max_v"), cell=stability_cell,
    summary="bicubic downscale x0.9 (the image gets smaller)", title="scale", short="scale",
))
declare(Family(
    name=SCALE_PAD, row_wise=True, build=build_scale_pad, kind="invariance", modality="visual", block="stability",
    variants=tuple(FILLS), meta_keys={"*": ("image_op",)}, headline=(AV, V), checks=("max_av", "max_v"),
    cell=stability_cell, summary="bicubic downscale x0.9 padded back to size, black and white",
    title="scale+pad", short="scale+pad",
))
