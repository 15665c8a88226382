"""The caption grammar of the scene-fact captions: noun-phrase mentions ("two green triangles"), relations
("a yellow square above a red circle") and whether a caption holds in a scene.

A mention claims an exact count of the shapes that match its colour and shape word; a relation
caption also claims the relation between the two (single) shapes it names. The flips of
``lgip_flip`` use it to check that a changed caption contradicts its image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from laya_robustness.scenes import COLOURS, SHAPES

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
#: The relation phrases of the fixture grammar and the converse of each.
RELATIONS = {"above": "below", "below": "above", "to the left of": "to the right of",
             "to the right of": "to the left of"}

_DET = r"(?P<det>a|an|" + "|".join(NUMBER_WORDS[1:]) + r")"
_COLOUR = r"(?:(?P<colour>" + "|".join(COLOURS) + r")\s+)?"
_NOUN = r"(?P<noun>(?:" + "|".join(SHAPES) + r"|shape)s?)"
MENTION_PATTERN = re.compile(rf"\b{_DET}\s+{_COLOUR}{_NOUN}\b", re.IGNORECASE)


@dataclass(frozen=True)
class Mention:
    """A noun phrase of a caption: it claims ``count`` shapes match ``colour`` and ``shape``.

    ``colour`` / ``shape`` None match any colour / shape. The spans locate the
    determiner, the colour word and the noun in the caption text.
    """

    count: int
    colour: str | None
    shape: str | None
    det_span: tuple[int, int]
    colour_span: tuple[int, int] | None
    noun_span: tuple[int, int]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.colour is None or obj["colour"] == self.colour) and (self.shape is None or obj["shape"] == self.shape)


def count_of(det: str) -> int:
    """The count a determiner claims: "a"/"an" is one, a number word its number."""
    det = det.lower()
    return 1 if det in ("a", "an") else NUMBER_WORDS.index(det)


def noun_for(shape: str | None, count: int) -> str:
    """The noun of a mention: the shape word (or "shape"), plural unless the count is one."""
    word = shape or "shape"
    return word if count == 1 else word + "s"


def determiner_for(count: int, next_word: str) -> str:
    """"a"/"an" for one (by the next word's first letter), the number word otherwise."""
    if count == 1:
        return "an" if next_word[:1].lower() in "aeiou" else "a"
    return NUMBER_WORDS[count]


def noun_phrase(count: int, colour: str | None, shape: str | None) -> str:
    """"a red circle", "two green triangles", "three circles", "two red shapes"."""
    rest = " ".join(w for w in (colour, noun_for(shape, count)) if w)
    return f"{determiner_for(count, rest)} {rest}"


def parse_mentions(text: str) -> list[Mention]:
    """Every noun phrase of the fixture grammar in ``text``, left to right."""
    out = []
    for m in MENTION_PATTERN.finditer(text):
        noun = m.group("noun").lower().rstrip("s")
        colour = m.group("colour")
        out.append(Mention(count_of(m.group("det")), colour.lower() if colour else None,
                           None if noun == "shape" else noun, m.span("det"),
                           m.span("colour") if colour else None, m.span("noun")))
    return out


def parse_relation(text: str, mentions: Sequence[Mention]) -> str | None:
    """The relation phrase between the first two mentions ("above", "to the left of", ...), if any."""
    if len(mentions) < 2:
        return None
    between = text[mentions[0].noun_span[1]:mentions[1].det_span[0]].strip().lower()
    return between if between in RELATIONS else None


def relation_holds(relation: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether shape ``a`` stands in ``relation`` to shape ``b`` on the grid (rows grow downwards)."""
    if relation == "above":
        return a["row"] < b["row"]
    if relation == "below":
        return a["row"] > b["row"]
    if relation == "to the left of":
        return a["col"] < b["col"]
    if relation == "to the right of":
        return a["col"] > b["col"]
    raise KeyError(f"unknown relation {relation!r} (known: {', '.join(RELATIONS)})")


def caption_holds(text: str, objects: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a fixture-grammar caption is true of the scene ``objects``.

    True iff the caption names at least one mention, every mention's count equals the
    number of objects it matches, and a relation between the first two mentions holds
    between the objects they match (each must then match exactly one).

    >>> scene = [{"shape": "circle", "colour": "red", "col": 0, "row": 0},
    ...          {"shape": "square", "colour": "blue", "col": 2, "row": 3}]
    >>> caption_holds("a red circle above a blue square", scene), caption_holds("two red circles", scene)
    (True, False)
    """
    mentions = parse_mentions(text)
    if not mentions:
        return False
    matched = [[o for o in objects if m.matches(o)] for m in mentions]
    if any(len(objs) != m.count for m, objs in zip(mentions, matched)):
        return False
    relation = parse_relation(text, mentions)
    if relation is None:
        return True
    a, b = matched[0], matched[1]
    return len(a) == 1 and len(b) == 1 and relation_holds(relation, a[0], b[0])
