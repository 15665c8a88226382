"""Open answers: the normalisation that makes a generated answer comparable with the accepted ones.

The stability study compares answers "after removing case, trailing dots or unneeded white-space":

    normalize_answer(text) = the text lower-cased, with runs of white-space collapsed to one space,
    stripped, and trailing full stops, commas, semicolons, colons, exclamation and question marks
    removed.

>>> normalize_answer("  The  Red Car. ")
'the red car'
>>> is_accepted("Yes!", ["yes", "yeah"])
True
"""

from __future__ import annotations

import re
from typing import Iterable

_SPACE = re.compile(r"\s+")
_TRAILING = ".,;:!?"


def normalize_answer(text: str) -> str:
    """Lower case, one space between words, no outer space, no trailing punctuation (see the module doc)."""
    if not isinstance(text, str):
        raise TypeError(f"an answer is a string, got {type(text).__name__}")
    return _SPACE.sub(" ", text.lower()).strip().rstrip(_TRAILING).rstrip()


def is_accepted(answer: str, accepted: Iterable[str]) -> bool:
    """Whether the normalised answer equals one of the normalised accepted answers."""
    return normalize_answer(answer) in {normalize_answer(a) for a in accepted}
