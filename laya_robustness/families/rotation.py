"""rotation and rotation_sweep: the same question on the image turned, with the canvas expanded.

Every image is turned with PIL's ``Image.rotate(angle, resample=BICUBIC, expand=True,
fillcolor=(0, 0, 0))``: a positive angle turns it counter-clockwise, the canvas grows so no
pixel is cut off, and the corners it gains are black (the reference's padding). Multiples of 90
degrees are exact transpositions.

- rotation (default), variants ``rot_m30`` / ``rot_p30``: -30 (clockwise) and +30 degrees.
- rotation_sweep (opt-in: ``--families rotation_sweep``), variants ``rot30``, ``rot60`` ...
  ``rot330``: every 30 degrees (0 is the orig row), reported separately for rotation-variant and
  rotation-invariant questions (the reference's Fig. 5).

A question is rotation-variant when it asks about a direction or a frame-relative position,
which a rotation may change ("Is the ball on the left blue?"), and rotation-invariant otherwise
("Is there an elephant?"). The row's ``meta["rotation_variant"]`` (true / false) decides when it
has one; otherwise :func:`is_rotation_variant` does, a rule: the question or one of its options
contains one of :data:`ROTATION_TERMS` as a whole word, ignoring case. Known misses of the rule:
"over" (too often "over 18"), "face" (the noun), pose words ("standing", "lying") and reading
order ("first line") are not in the list; "right" also matches "the right answer".

Rows without images get none. Every row's meta gets ``image_op`` (``{"op": "rotate", "angle": a,
"expand": True, "fill": [0, 0, 0], "resample": "bicubic"}``), ``rotation_variant`` (bool) and
``rotation_rule`` ("meta" when the row decided, else the matched term, or "" when none matched);
the source meta keys are kept.

>>> is_rotation_variant("Is the circle left of the square?"), is_rotation_variant("Is there a red circle?")
(True, False)
>>> rotation_rule("Which way is the arrow pointing?", ())
'pointing'
"""

from __future__ import annotations

import re
from typing import Sequence

from PIL import Image

from laya_robustness.families import Family, declare
from laya_robustness.metrics.stability import AV, V, rotation_cell
from laya_robustness.rows import ROTATION_VARIANT, Row, user_meta_problem

ROTATION = "rotation"
ROTATION_SWEEP = "rotation_sweep"
FILL = (0, 0, 0)
DEFAULT_ANGLES = {"rot_m30": -30, "rot_p30": 30}
SWEEP_ANGLES = {f"rot{a}": a for a in range(30, 360, 30)}
META_KEY = ROTATION_VARIANT
META_DECIDED = "meta"

#: Whole words (any case) that make a question rotation-variant: horizontal and vertical frame
#: positions, gravity-relative relations, orientation and compass directions.
ROTATION_TERMS = (
    "left", "leftmost", "right", "rightmost",
    "above", "below", "beneath", "underneath", "under", "overhead",
    "top", "topmost", "bottom", "bottommost", "upper", "uppermost", "lower", "lowermost",
    "higher", "highest", "lowest",
    "up", "upward", "upwards", "down", "downward", "downwards", "upside", "upright", "sideways",
    "facing", "faces", "pointing", "points", "direction", "directions", "orientation", "oriented",
    "clockwise", "counterclockwise", "anticlockwise", "rotated", "tilted", "tilting",
    "horizontal", "horizontally", "vertical", "vertically", "diagonal", "diagonally",
    "north", "south", "east", "west", "northeast", "northwest", "southeast", "southwest",
)
_TERMS = re.compile(r"\b(" + "|".join(sorted(ROTATION_TERMS, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def rotation_rule(question: str, options: Sequence[str] = ()) -> str:
    """The first rotation term in the question (then in the options), lower-cased; "" when there is none."""
    for text in (question, *options):
        match = _TERMS.search(text)
        if match:
            return match.group(1).lower()
    return ""


def is_rotation_variant(question: str, options: Sequence[str] = ()) -> bool:
    """Whether the question (or an option) asks about a direction or frame-relative position (the rule)."""
    return bool(rotation_rule(question, options))


def rotation_class(row: Row) -> tuple[bool, str]:
    """(rotation-variant?, why): the row's ``meta["rotation_variant"]`` when it has one, else the rule."""
    if META_KEY in row.meta:
        problem = user_meta_problem(META_KEY, row.meta[META_KEY])
        if problem is not None:
            raise ValueError(f"{row.row_id}: field 'meta.{problem[0]}': {problem[1]}")
        return row.meta[META_KEY], META_DECIDED
    rule = rotation_rule(row.question, row.options)
    return bool(rule), rule


def rotate_image(image: Image.Image, angle: float) -> Image.Image:
    """The RGB image turned ``angle`` degrees counter-clockwise on an expanded, black-cornered canvas."""
    return image.convert("RGB").rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=FILL)


def _rotations(rows: Sequence[Row], family: str, angles: dict[str, int]) -> list[Row]:
    out = []
    for row in rows:
        if not row.images:
            continue
        variant, why = rotation_class(row)
        for name, angle in angles.items():
            op = {"op": "rotate", "angle": angle, "expand": True, "fill": list(FILL), "resample": "bicubic"}
            meta = {**row.meta, "image_op": op, META_KEY: variant, "rotation_rule": why}
            out.append(row.derive(family, name, images=tuple(rotate_image(im, angle) for im in row.images), meta=meta))
    return out


def build_rotation(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images turned by -30 and +30 degrees (no randomness: ``seed`` is unused)."""
    return _rotations(rows, ROTATION, DEFAULT_ANGLES)


def build_rotation_sweep(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row with images turned by 30, 60, ..., 330 degrees (no randomness: ``seed`` is unused)."""
    return _rotations(rows, ROTATION_SWEEP, SWEEP_ANGLES)


META_KEYS = {"*": ("image_op", META_KEY, "rotation_rule")}
declare(Family(
    name=ROTATION, row_wise=True, build=build_rotation, kind="invariance", modality="visual", block="stability",
    variants=tuple(DEFAULT_ANGLES), meta_keys=META_KEYS, headline=(AV, V), checks=("max_av", "max_v"),
    cell=rotation_cell, summary="rotated -30 and +30 degrees, canvas expanded, black corners",
    title="rotation", short="rotation",
))
declare(Family(
    name=ROTATION_SWEEP, row_wise=True, build=build_rotation_sweep, kind="invariance", modality="visual", block="stability",
    variants=tuple(SWEEP_ANGLES), meta_keys=META_KEYS, headline=(AV, V), checks=("max_av", "max_v"),
    cell=rotation_cell, default=False, slow=True, title="rotation sweep", short="sweep",  # opt-in: 11 variants per row
    summary="rotated 30..330 degrees in steps of 30, rotation-variant and -invariant questions apart (opt-in)",
))
