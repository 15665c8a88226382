"""rephrase: the same question asked in other words, by general rules and by the user's own rephrasings.

Rules (each a general pattern over a question form, matched ignoring case on the question with
outer spaces stripped; X, Y stand for the matched text, kept as written). A rule that does not
match, or whose output equals the question, produces no row:

- ``show``: "Is/Are there X?" -> "Does the image show X?" ("Is there X in the picture?" ->
  "Does the picture show X?")
- ``see``: "Is/Are there X?" -> "Can you see X in the image?" ("Can you see X?" when X already
  names the image, picture or photo)
- ``which_colour``: "What colour/color is/are X?" -> "Which colour is/are X?"
- ``colour_of``: "What/Which colour is/are X?" and "What/Which colour does/do X have?" ->
  "What is the colour of X?" (the spelling of "colour" / "color" is kept)
- ``colour_is``: "What/Which colour does/do X have?" -> "What colour is/are X?"
- ``number_of``: "How many X are there[ Y]?" -> "What is the number of X[ Y]?"
- ``can_be_seen``: "How many X are there[ Y]?" -> "How many X can be seen[ Y]?"
- ``to_the_side``: "Is the X left of the Y?" -> "Is the X to the left of the Y?" (right too), and
  back when the question says "to the left of" or "on the left of".
- ``converse``: "Is the X [to the ]left of / right of / above / below the Y?" -> "Is the Y
  [to the ]right of / left of / below / above the X?" (the same relation seen from the other object)
- ``tell_me``: "What is the X?" or "What is the X of Y?" (X one word) -> "Can you tell me what
  the X [of Y] is?"

User rephrasings: the strings of the row's ``meta["rephrasings"]`` (a list, put there from the
user's JSONL file by :func:`attach_variants`), variant ``user_<i>`` for the i-th string;
an empty string or one equal to the question produces no row. Every variant keeps the options,
label, images, context, group and cluster; ``meta["rephrase"]`` holds ``{"source": "rule",
"rule": name}`` or ``{"source": "user", "index": i}``. Rows of every primitive (open ones too) are
rephrased. No randomness: ``seed`` is unused.

The user's files (read by ``loaders.variant_files``, attached by :func:`attach_variants`): JSONL, one object per line,
``{"row_id": ..., "rephrasings": ["...", ...]}`` or ``{"row_id": ..., "translations": {"fr":
"...", ...}}``, with an optional ``"dataset"`` (without it, every dataset's row of that id gets
them) and an optional ``"provenance"`` object (how the texts were made; ``python -m laya_robustness
variants rephrase|translate`` writes these files with a language model). Row ids that name no loaded
row are skipped (the file may cover rows a sampled run leaves out); a bad line raises RowError naming
the file, line and field.

>>> rephrasings("Is there a red circle?")
{'show': 'Does the image show a red circle?', 'see': 'Can you see a red circle in the image?'}
>>> rephrasings("Is the circle left of the square?")["converse"]
'Is the square right of the circle?'
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Mapping, Sequence

from laya_robustness.families import Family, declare
from laya_robustness.metrics.stability import AV, V, stability_cell
from laya_robustness.rows import LANGUAGE_CODE, REPHRASINGS, TRANSLATIONS, Row, user_meta_problem  # noqa: F401  (LANGUAGE_CODE: its users)

FAMILY = "rephrase"
USER_KEY, TRANSLATIONS_KEY = REPHRASINGS, TRANSLATIONS
_IMAGE_WORDS = re.compile(r"\b(image|picture|photo|photograph)\b", re.IGNORECASE)
_OPPOSITE = {"left": "right", "right": "left", "above": "below", "below": "above"}


#: What the gate says when no rule applies to a set's questions and no rephrasing was given.
WHEN_EMPTY = ("no rule applies to its questions and --rephrasings gives none; write rephrasings with a language "
              "model: python -m laya_robustness variants rephrase --model <chat model> --data <rows> --out "
              "rephrasings.jsonl, then pass --rephrasings rephrasings.jsonl")


def _match(pattern: str, question: str) -> re.Match | None:
    return re.fullmatch(pattern, question.strip(), flags=re.IGNORECASE)


def _show(q: str) -> str | None:
    m = _match(r"(?:is|are) there (.+?)\s*\?", q)
    if not m:
        return None
    where = re.fullmatch(r"(.+?) (?:in|on) (the|this) (image|picture|photo|photograph)", m[1], flags=re.IGNORECASE)
    return f"Does {where[2]} {where[3]} show {where[1]}?" if where else f"Does the image show {m[1]}?"


def _see(q: str) -> str | None:
    m = _match(r"(?:is|are) there (.+?)\s*\?", q)
    if not m:
        return None
    return f"Can you see {m[1]}?" if _IMAGE_WORDS.search(m[1]) else f"Can you see {m[1]} in the image?"


def _which_colour(q: str) -> str | None:
    m = _match(r"what (colou?r) (is|are) (.+?)\s*\?", q)
    return m and f"Which {m[1].lower()} {m[2].lower()} {m[3]}?"


def _colour_of(q: str) -> str | None:
    m = _match(r"(?:what|which) (colou?r) (?:is|are) (.+?)\s*\?", q) or _match(
        r"(?:what|which) (colou?r) (?:does|do) (.+?) have\s*\?", q)
    return m and f"What is the {m[1].lower()} of {m[2]}?"


def _colour_is(q: str) -> str | None:
    m = _match(r"(?:what|which) (colou?r) (does|do) (.+?) have\s*\?", q)
    return m and f"What {m[1].lower()} {'is' if m[2].lower() == 'does' else 'are'} {m[3]}?"


def _number_of(q: str) -> str | None:
    m = _match(r"how many (.+?) are there((?: \S.*?)?)\s*\?", q)
    return m and f"What is the number of {m[1]}{m[2]}?"


def _can_be_seen(q: str) -> str | None:
    m = _match(r"how many (.+?) are there((?: \S.*?)?)\s*\?", q)
    return m and f"How many {m[1]} can be seen{m[2]}?"


_SIDE = r"is (the [^?]+?) (to the |on the )?(left|right) of (the [^?]+?)\s*\?"


def _to_the_side(q: str) -> str | None:
    m = _match(_SIDE, q)
    if not m:
        return None
    side = "" if m[2] else "to the "
    return f"{q.strip()[:2]} {m[1]} {side}{m[3]} of {m[4]}?"


def _converse(q: str) -> str | None:
    m = _match(_SIDE, q)
    if m:
        return f"{q.strip()[:2]} {m[4]} {m[2] or ''}{_OPPOSITE[m[3].lower()]} of {m[1]}?"
    m = _match(r"is (the [^?]+?) (above|below) (the [^?]+?)\s*\?", q)
    return m and f"{q.strip()[:2]} {m[3]} {_OPPOSITE[m[2].lower()]} {m[1]}?"


def _tell_me(q: str) -> str | None:
    m = _match(r"what is the (\w+)((?: of .+?)?)\s*\?", q)
    return m and f"Can you tell me what the {m[1]}{m[2]} is?"


RULES: dict[str, Callable[[str], str | None]] = {
    "show": _show, "see": _see, "which_colour": _which_colour, "colour_of": _colour_of, "colour_is": _colour_is,
    "number_of": _number_of, "can_be_seen": _can_be_seen, "to_the_side": _to_the_side, "converse": _converse,
    "tell_me": _tell_me,
}


def rephrasings(question: str) -> dict[str, str]:
    """rule name -> the rephrased question, for every rule that applies and changes the question."""
    out = {}
    for name, rule in RULES.items():
        new = rule(question)
        if new and new.strip() != question.strip():
            out[name] = new
    return out


def user_strings(row: Row, key: str = USER_KEY) -> list[str]:
    """The row's ``meta[key]`` as a list of strings ([] when absent); anything else raises ValueError."""
    value = row.meta.get(key, [])
    problem = user_meta_problem(key, value)
    if problem is not None:
        raise ValueError(f"{row.row_id}: field 'meta.{problem[0]}': {problem[1]}")
    return list(value)


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row under each rule that applies, then under each of its user rephrasings."""
    out = []
    for row in rows:
        for name, question in rephrasings(row.question).items():
            meta = {**row.meta, "rephrase": {"source": "rule", "rule": name}}
            out.append(row.derive(FAMILY, f"rule_{name}", question=question, meta=meta))
        for i, question in enumerate(user_strings(row)):
            if question.strip() and question.strip() != row.question.strip():
                meta = {**row.meta, "rephrase": {"source": "user", "index": i}}
                out.append(row.derive(FAMILY, f"user_{i}", question=question, meta=meta))
    return out


# --- the user's variants -----------------------------------------------------------------------

def attach_variants(rows_by_dataset: Mapping[str, list[Row]], entries: Mapping, key: str) -> dict[str, list[Row]]:
    """The rows with the user's variants of ``entries`` ((dataset or None, row_id) -> value, as
    ``loaders.variant_files.read_user_file`` reads them) in their meta: rephrasings (``key`` ``"rephrasings"``) appended
    to ``meta["rephrasings"]``, translations merged into ``meta["translations"]`` (a file's language replaces the
    row's own); rows without an entry are returned as they are."""
    out = {}
    for dataset, rows in rows_by_dataset.items():
        new = []
        for row in rows:
            found = [entries[w] for w in ((dataset, row.row_id), (None, row.row_id)) if w in entries]
            for value in found:
                if key == USER_KEY:
                    meta = {**row.meta, key: [*user_strings(row, key), *value]}
                else:
                    meta = {**row.meta, key: {**dict(row.meta.get(key) or {}), **value}}
                row = dataclasses.replace(row, meta=meta)
            new.append(row)
        out[dataset] = new
    return out


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="invariance", modality="phrasing", block="stability",
    reads_pixels=False,
    variants=tuple(f"rule_{name}" for name in RULES) + ("user_*",), meta_keys={"*": ("rephrase",)},
    headline=(AV, V), checks=("max_av", "max_v"), cell=stability_cell,
    summary="the question in other words: general rules over question forms, and the user's rephrasings",
    title="rephrase", short="rephrase", when_empty=WHEN_EMPTY,
))
