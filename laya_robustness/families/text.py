"""text: the same question reworded by fixed rules (no randomness); labels never change.

Variants (a rule that does not apply, or leaves the row unchanged, produces no row):

- ``prefix``: "Question: " + question.
- ``suffix``: question + " Choose the correct option."
- ``double_spaces``: every single space between two words becomes two spaces.
- ``first_case``: the case of the question's first letter toggled; skipped when the
  first word is an acronym or does not start with a letter.
- ``end_punct``: a final "?" or "." dropped, otherwise "?" added.
- ``noul_frame_true`` (noul rows): "Is it true that <question>?", the question's first
  letter lower-cased unless its first word is an acronym, its final ?/. removed.
- ``noul_frame_decide`` (noul rows): "Decide whether the answer to this question is yes: <question>".
- ``noul_options`` (noul rows): the options toggled between "no"/"yes" and "No"/"Yes".
- ``option_case`` (choice rows): the first letter of every plain-word option toggled (one
  that starts with a letter and is not an acronym; numbers and the rest stay); skipped
  when two options are equal ignoring case.
- ``option_period`` (choice rows): "." appended to every option that does not end with one.

An acronym is a word whose leading letters, or all of its letters, are two or more
upper-case letters ("TV", "DNA-based", "U.S.").
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from laya_robustness.families import Family, declare
from laya_robustness.rows import Row

FAMILY = "text"
PREFIX = "Question: "
SUFFIX = " Choose the correct option."
DECIDE = "Decide whether the answer to this question is yes: "
NOUL_OPTIONS = ("no", "yes")

_SINGLE_SPACE = re.compile(r"(?<=\S) (?=\S)")
_LEADING_LETTERS = re.compile(r"[^\W\d_]*")

Changes = dict[str, Any]


def is_acronym(word: str) -> bool:
    """Whether the word's leading letters, or all its letters, are 2+ upper-case letters."""
    lead = _LEADING_LETTERS.match(word).group(0)
    letters = "".join(c for c in word if c.isalpha())
    return any(len(s) >= 2 and s.isupper() for s in (lead, letters))


def is_plain_word(text: str) -> bool:
    """Whether the text's first word starts with a letter and is not an acronym."""
    words = text.split()
    return bool(words) and words[0][0].isalpha() and not is_acronym(words[0])


def _recase_first(text: str, how: Callable[[str], str]) -> str:
    i = len(text) - len(text.lstrip())
    return text[:i] + how(text[i]) + text[i + 1 :]


def toggle_first(text: str) -> str:
    """The text with the case of its first non-space character toggled."""
    return _recase_first(text, lambda c: c.lower() if c.isupper() else c.upper())


def strip_end(text: str) -> str:
    """The text without trailing space and without one final "?" or "."."""
    text = text.rstrip()
    return text[:-1].rstrip() if text.endswith(("?", ".")) else text


def _prefix(row: Row) -> Changes:
    return {"question": PREFIX + row.question}


def _suffix(row: Row) -> Changes:
    return {"question": row.question + SUFFIX}


def _double_spaces(row: Row) -> Changes:
    return {"question": _SINGLE_SPACE.sub("  ", row.question)}


def _first_case(row: Row) -> Changes | None:
    return {"question": toggle_first(row.question)} if is_plain_word(row.question) else None


def _end_punct(row: Row) -> Changes | None:
    stripped = strip_end(row.question)
    new = stripped if stripped != row.question.rstrip() else stripped + "?"
    return {"question": new} if stripped.strip() else None


def _is_noul(row: Row) -> bool:
    return row.primitive == "noul" and tuple(o.lower() for o in row.options) == NOUL_OPTIONS


def _noul_frame_true(row: Row) -> Changes | None:
    body = strip_end(row.question).strip()
    if not _is_noul(row) or not body:
        return None
    if is_plain_word(body):
        body = _recase_first(body, str.lower)
    return {"question": f"Is it true that {body}?"}


def _noul_frame_decide(row: Row) -> Changes | None:
    return {"question": DECIDE + row.question.strip()} if _is_noul(row) else None


def _noul_options(row: Row) -> Changes | None:
    if not _is_noul(row):
        return None
    return {"options": ("No", "Yes") if row.options == NOUL_OPTIONS else NOUL_OPTIONS}


def _option_case(row: Row) -> Changes | None:
    if row.primitive != "choice" or len({o.casefold() for o in row.options}) < len(row.options):
        return None
    return {"options": tuple(toggle_first(o) if is_plain_word(o) else o for o in row.options)}


def _option_period(row: Row) -> Changes | None:
    if row.primitive != "choice":
        return None
    return {"options": tuple(o if o.rstrip().endswith(".") else o.rstrip() + "." for o in row.options)}


RULES: tuple[tuple[str, Callable[[Row], Changes | None]], ...] = (
    ("prefix", _prefix),
    ("suffix", _suffix),
    ("double_spaces", _double_spaces),
    ("first_case", _first_case),
    ("end_punct", _end_punct),
    ("noul_frame_true", _noul_frame_true),
    ("noul_frame_decide", _noul_frame_decide),
    ("noul_options", _noul_options),
    ("option_case", _option_case),
    ("option_period", _option_period),
)


def _changes_row(row: Row, changes: Changes | None) -> bool:
    return changes is not None and any(getattr(row, k) != v for k, v in changes.items())


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row under each text rule that applies to it (the seed is unused: the rules are fixed)."""
    out = []
    for row in rows:
        for name, rule in RULES:
            changes = rule(row)
            if _changes_row(row, changes):
                out.append(row.derive(FAMILY, name, **changes))
    return out


declare(Family(
    # no modality: the stability study's phrasing set is its rephrasings (family rephrase), not these surface
    # edits; `stability --modalities text=phrasing` counts them
    name=FAMILY, row_wise=True, build=build, kind="invariance", variants=tuple(name for name, _ in RULES),
    reads_pixels=False,
    checks=("max_flip", "max_drop", "min_acc", "max_ece"),
    summary="prefix, suffix, double spaces, first-letter case, end punctuation, yes/no reframings, option case, "
            "option period",
    title="text", short="text",
))
