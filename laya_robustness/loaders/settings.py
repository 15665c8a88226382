"""How ``--data`` is read (column map, image-size limit, data-directory rule) and the parsers of those options.

Every parser raises ``ValueError`` with a message naming the accepted format (the caller names the option).

>>> parse_data_map("question=prompt,options=choices,label=answer_idx")
{'question': 'prompt', 'options': 'choices', 'label': 'answer_idx'}
>>> parse_max_image_pixels("40M"), parse_max_image_pixels("1000000")
(40000000, 1000000)
>>> parse_allow_outside_data("yes")
True
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Mapping

from laya_robustness.rows import RECORD_FIELDS

DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
#: Longest image side kept when pixels are decoded; larger images are scaled down to it (the stability
#: study limits every image to 1024 px "by resizing when necessary"). 0 keeps every size.
DEFAULT_MAX_IMAGE_SIDE = 1024
#: Room for headers, EXIF and ICC profiles on top of the pixel data in the payload bound.
PAYLOAD_SLACK_BYTES = 1 << 20
_NONE = ("", "none")
_YES = ("yes", "true", "on", "1")
_NO = ("no", "false", "off", "0")


@dataclass(frozen=True)
class LoadSettings:
    """The reading rules of one run.

    ``data_map``: row field -> column of a parquet / ``datasets`` table (an empty column: the
    field is not read). ``max_image_pixels``: the largest width x height accepted, checked from
    the header before any pixel is decoded. ``allow_outside_data``: read image paths that are
    absolute or lead out of the data directory. ``max_image_side``: a decoded image whose longest side
    is longer is scaled down to it, aspect kept (bicubic); 0 keeps every size.
    """

    data_map: Mapping[str, str] = field(default_factory=dict)
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    allow_outside_data: bool = False
    max_image_side: int = DEFAULT_MAX_IMAGE_SIDE

    def __post_init__(self):
        for name, column in self.data_map.items():
            if name not in RECORD_FIELDS or not isinstance(column, str):
                raise ValueError(f"data_map: {name!r}={column!r} is not a row field mapped to a column name")
        if isinstance(self.max_image_pixels, bool) or not isinstance(self.max_image_pixels, int) \
                or self.max_image_pixels < 1:
            raise ValueError(f"max_image_pixels: expected a positive int, got {self.max_image_pixels!r}")
        if isinstance(self.max_image_side, bool) or not isinstance(self.max_image_side, int) \
                or self.max_image_side < 0:
            raise ValueError(f"max_image_side: expected an int >= 0, got {self.max_image_side!r}")

    @property
    def max_image_bytes(self) -> int:
        """The largest encoded image accepted: 4 bytes per pixel of the limit (uncompressed RGBA) + 1 MiB."""
        return 4 * self.max_image_pixels + PAYLOAD_SLACK_BYTES

    @classmethod
    def from_text(cls, data_map: str = "none", max_image_pixels: str = str(DEFAULT_MAX_IMAGE_PIXELS),
                  allow_outside_data: str = "no") -> "LoadSettings":
        """Settings from the option strings (``--data-map``, ``--max-image-pixels``, ``--allow-outside-data``)."""
        return cls(parse_data_map(data_map), parse_max_image_pixels(max_image_pixels),
                   parse_allow_outside_data(allow_outside_data))


def parse_data_map(text: str) -> dict[str, str]:
    """``"field=column,..."`` -> ``{field: column}``; ``""`` or ``"none"`` -> ``{}``.

    Fields are row fields (``question``, ``options``, ``label``, ``images``, ...); a column may
    be empty (``answers=``) to leave a same-named column unread. Column names cannot hold commas.
    """
    if text.strip().lower() in _NONE:
        return {}
    pairs = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not name:
            raise ValueError(f"{part!r} is not field=column (e.g. question=prompt,options=choices)")
        pairs.append((name, column))
    return data_map_of(pairs)


def data_map_of(pairs) -> dict[str, str]:
    """``{field: column}`` from (field, column) pairs (a mapping's items, or ``parse_data_map``'s), each field a
    row field mapped once, each column a string."""
    out: dict[str, str] = {}
    for name, column in pairs:
        if not isinstance(name, str) or not isinstance(column, str):
            raise ValueError(f"{name!r}: {column!r} is not a row field and a column name")
        if name not in RECORD_FIELDS:
            close = difflib.get_close_matches(name, RECORD_FIELDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown row field {name!r}{hint} (fields: {', '.join(RECORD_FIELDS)})")
        if name in out:
            raise ValueError(f"field {name!r} is mapped twice")
        out[name] = column
    return out


def parse_max_image_pixels(text: str) -> int:
    """A positive pixel count: an integer (``40000000``) or megapixels with an ``M`` (``40M``, ``2.5M``)."""
    raw = text.strip().replace("_", "")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([mM]?)", raw)
    value = None
    if match:
        number = Decimal(match.group(1)) * (10**6 if match.group(2) else 1)
        if number == number.to_integral_value():
            value = int(number)
    if value is None or value < 1:
        raise ValueError(f"{text!r} is not a positive pixel count "
                         f"(an integer such as 40000000, or megapixels such as 40M)")
    return value


def parse_allow_outside_data(text: str) -> bool:
    """``yes``/``true``/``on``/``1`` or ``no``/``false``/``off``/``0`` (any case)."""
    word = text.strip().lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    raise ValueError(f"{text!r} is not yes or no")
