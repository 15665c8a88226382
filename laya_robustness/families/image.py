"""image: the same question on a slightly altered picture; every image of a row is altered.

Variants (rows without images get none):

- ``jpeg70`` / ``jpeg40`` / ``jpeg20``: re-encoded as JPEG at that quality (4:2:0
  subsampling), decoded back to RGB.
- ``crop_center95``: a centred crop keeping 95% of the area (each side x sqrt(0.95), rounded).
- ``crop_random90``: a crop keeping 90% of the area at a position drawn from
  ``keyed_rng(seed, "image", row_id, "crop_random90", image_index)``.
- ``rescale50``: downscaled x0.5 and back to the original size, bicubic both ways.
- ``bright90`` / ``bright110``: PIL ``ImageEnhance.Brightness`` at 0.9 / 1.1.

Crops keep their smaller size. ``meta["image_op"]`` holds the op's parameters (and, for
crops, one ``[left, top, right, bottom]`` box per image); the source meta keys are kept.
"""

from __future__ import annotations

import io
import math
from typing import Any, Mapping, Sequence

import numpy as np
from PIL import Image, ImageEnhance

from laya_robustness.families import Family, declare
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

FAMILY = "image"
JPEG_SUBSAMPLING = 2  # PIL's code for 4:2:0, fixed so the output never depends on PIL's default

VARIANTS: dict[str, dict[str, Any]] = {
    "jpeg70": {"op": "jpeg", "quality": 70, "subsampling": "4:2:0"},
    "jpeg40": {"op": "jpeg", "quality": 40, "subsampling": "4:2:0"},
    "jpeg20": {"op": "jpeg", "quality": 20, "subsampling": "4:2:0"},
    "crop_center95": {"op": "crop", "area": 0.95, "position": "center"},
    "crop_random90": {"op": "crop", "area": 0.9, "position": "random"},
    "rescale50": {"op": "rescale", "factor": 0.5, "resample": "bicubic"},
    "bright90": {"op": "brightness", "factor": 0.9},
    "bright110": {"op": "brightness", "factor": 1.1},
}


def jpeg(image: Image.Image, quality: int) -> Image.Image:
    """The image after a JPEG round trip at ``quality``."""
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality, subsampling=JPEG_SUBSAMPLING)
    buf.seek(0)
    with Image.open(buf) as decoded:
        return decoded.convert("RGB")


def crop_box(size: tuple[int, int], area: float, rng: np.random.Generator | None = None) -> tuple[int, ...]:
    """A box keeping ``area`` of the image: centred, or at a random position when ``rng`` is given."""
    w, h = size
    scale = math.sqrt(area)
    cw, ch = max(1, round(w * scale)), max(1, round(h * scale))
    if rng is None:
        left, top = (w - cw) // 2, (h - ch) // 2
    else:
        left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    return (left, top, left + cw, top + ch)


def rescale(image: Image.Image, factor: float) -> Image.Image:
    """The image scaled by ``factor`` and back to its size, bicubic both ways."""
    w, h = image.size
    small = image.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.BICUBIC)
    return small.resize((w, h), Image.Resampling.BICUBIC)


def apply_op(image: Image.Image, params: Mapping[str, Any], rng: np.random.Generator) -> tuple[Image.Image, Any]:
    """The altered RGB image and, for crops, its box (else None)."""
    image = image.convert("RGB")
    op = params["op"]
    if op == "jpeg":
        return jpeg(image, params["quality"]), None
    if op == "crop":
        box = crop_box(image.size, params["area"], rng if params["position"] == "random" else None)
        return image.crop(box), list(box)
    if op == "rescale":
        return rescale(image, params["factor"]), None
    if op == "brightness":
        return ImageEnhance.Brightness(image).enhance(params["factor"]), None
    raise ValueError(f"unknown image op {op!r}")


def _variant(row: Row, name: str, params: Mapping[str, Any], seed: int) -> Row:
    images, boxes = [], []
    for i, image in enumerate(row.images):
        new, box = apply_op(image, params, keyed_rng(seed, FAMILY, row.row_id, name, i))
        images.append(new)
        boxes.append(box)
    op = {**params, "boxes": boxes} if params["op"] == "crop" else dict(params)
    return row.derive(FAMILY, name, images=tuple(images), meta={**row.meta, "image_op": op})


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images under each of the eight image ops."""
    return [_variant(row, name, params, seed) for row in rows if row.images for name, params in VARIANTS.items()]


declare(Family(
    # no modality: the stability study's visual set is its benign perturbations (shift .. overlay), not these
    # compressions and crops; `stability --modalities image=visual` counts them
    name=FAMILY, row_wise=True, build=build, kind="invariance", variants=tuple(VARIANTS),
    meta_keys={"*": ("image_op",)},
    checks=("max_flip", "max_drop", "min_acc", "max_ece"),
    summary="JPEG q70/q40/q20, centre crop 95%, seeded crop 90%, rescale x0.5, brightness x0.9/x1.1",
    title="image", short="image",
))
