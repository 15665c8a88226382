"""What a language model's answer is cut into, and the checks every generated text passes before it is kept.

A response first loses any reasoning block (``<think>...</think>``). A *rephrase* response is read line
by line: list markers ("1.", "2)", "-", "*") and enclosing quotes are removed and blank lines skipped;
each line is a candidate, checked in order until ``n`` are kept (the lines after that are rejected as
``extra``). A *translate* response is one candidate: its lines joined, enclosing quotes removed.

A candidate is compared with the question through :func:`normalize` (case-folded, every run of
non-alphanumeric characters one space). It is rejected for the first of these reasons that holds:

- ``empty``: no letter or digit is left;
- ``garbled``: it holds a character that is no text: U+FFFD (bytes the tokenizer could not decode) or a
  control character other than a tab;
- ``copy``: it is the question itself;
- ``duplicate``: it is a variant already kept for the row (another rephrasing, another language);
- ``leaks_answer`` / ``leaks_option``: it contains the right answer (the gold option, an accepted
  answer of an open row) / another option's text, as whole words, where the question does not. The
  options are looked for as written, so in a translation that is their English text (a translated
  option cannot be told), and not the ``yes`` / ``no`` of a yes/no row ("no" is a word of many languages);
- ``not_a_question`` (rephrase): the question ends with "?" and the candidate does not;
- ``wrong_script`` (translate): fewer than half of its letters are in the target language's script;
- ``english`` (translate, a language written in Latin letters): at least 40% of its words (3 or more)
  are English words that few other languages use (:data:`ENGLISH_WORDS`); other languages in Latin
  letters cannot be told apart here;
- ``length``: len(candidate) / len(question) is outside [0.5, 2.5] for a rephrasing, [0.5, 4] for a
  translation ([0.15, 4] into Chinese, Japanese or Korean, whose characters carry more);
- ``repetitive``: 6 or more words (characters, in those three) of which fewer than half are distinct,
  a small model's greedy loop.

>>> rephrase_candidates("<think>ok</think>Here you go:\\n1. Does the image show a cat?\\n\\n2) \\"Is a cat shown?\\"")
['Here you go:', 'Does the image show a cat?', 'Is a cat shown?']
>>> normalize("  Is   there a RED circle?! ")
'is there a red circle'
"""

from __future__ import annotations

import re
import unicodedata
from typing import Sequence

from laya_robustness.analysis.rewriting.prompts import LATIN, language_script
from laya_robustness.rows import Row

#: Every reason a candidate can be rejected for, in the order the checks run (``extra``: beyond ``n``).
REASONS = ("empty", "garbled", "copy", "duplicate", "leaks_answer", "leaks_option", "not_a_question", "wrong_script",
           "english", "length", "repetitive", "extra")
REPHRASE_LENGTH = (0.5, 2.5)
TRANSLATE_LENGTH = (0.5, 4.0)
DENSE_SCRIPTS = {"CJK", "HIRAGANA", "KATAKANA", "HANGUL"}
DENSE_MIN_LENGTH = 0.15
ENGLISH_SHARE = 0.4
#: English words that few other languages written in Latin letters share (so "a", "in", "is", "an" are not here).
ENGLISH_WORDS = frozenset(
    "the are there what which who where when how many much of does this that these those it its can you see "
    "image picture photo shown please answer english colour color number left right with".split())
_REASONING = re.compile(r"<think>.*?</think>", re.DOTALL)
_MARKER = re.compile(r"^\s*(?:\(?\d{1,3}[.):]|[-*\u2022])\s*")
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb"
_NON_WORD = re.compile(r"[\W_]+")
_YES_NO = {"yes", "no"}


def normalize(text: str) -> str:
    """Case-folded, every run of characters that are not letters or digits one space, stripped."""
    return _NON_WORD.sub(" ", text.casefold()).strip()


def strip_reasoning(response: str) -> str:
    """The response without ``<think>...</think>`` blocks (or what precedes a lone closing tag)."""
    text = _REASONING.sub("", response)
    return text.split("</think>", 1)[1] if "</think>" in text else text


def _unquote(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text


def rephrase_candidates(response: str) -> list[str]:
    """The candidate rephrasings of a response, in order ([""] for a response with none)."""
    lines = [_unquote(_MARKER.sub("", line)) for line in strip_reasoning(response).splitlines()]
    return [line for line in lines if line] or [""]


def translation_candidate(response: str) -> str:
    """The one candidate of a translation response."""
    return _unquote(" ".join(line.strip() for line in strip_reasoning(response).splitlines() if line.strip()))


def _contains(haystack: str, needle: str) -> bool:
    return bool(needle) and f" {needle} " in f" {haystack} "


def _leak(text: str, row: Row, translation: bool) -> str | None:
    """``leaks_answer`` / ``leaks_option`` when the text holds an answer or option the question does not."""
    norm, question = normalize(text), normalize(row.question)
    gold = {normalize(a) for a in row.answers}
    if 0 <= row.label < len(row.options):
        gold.add(normalize(row.options[row.label]))
    others = {normalize(o) for o in row.options} - gold
    if translation and row.primitive == "noul":
        gold, others = gold - _YES_NO, others - _YES_NO
    if any(_contains(norm, g) and not _contains(question, g) for g in gold):
        return "leaks_answer"
    if any(_contains(norm, o) and not _contains(question, o) for o in others):
        return "leaks_option"
    return None


def _shared(text: str, row: Row, kept: Sequence[str], translation: bool) -> str | None:
    """The checks both tasks run first: empty, garbled, copy, duplicate, leaks."""
    norm = normalize(text)
    if not norm:
        return "empty"
    if any(c == "\ufffd" or unicodedata.category(c) == "Cc" and c != "\t" for c in text):
        return "garbled"
    if norm == normalize(row.question):
        return "copy"
    if any(norm == normalize(k) for k in kept):
        return "duplicate"
    return _leak(text, row, translation)


def _scripts(text: str) -> list[str]:
    return [unicodedata.name(c, "?").split(" ")[0] for c in text if c.isalpha()]


def _shape(text: str, question: str, bounds: tuple[float, float], dense: bool) -> str | None:
    """``length`` and ``repetitive``."""
    low, high = (DENSE_MIN_LENGTH, bounds[1]) if dense else bounds
    if not low <= len(text.strip()) / max(1, len(question.strip())) <= high:
        return "length"
    units = [c for c in normalize(text) if c != " "] if dense else normalize(text).split()
    if len(units) >= 6 and len(set(units)) < len(units) / 2:
        return "repetitive"
    return None


def check_rephrasing(text: str, row: Row, kept: Sequence[str]) -> str | None:
    """The reason a candidate rephrasing of ``row`` is rejected (``kept``: the row's rephrasings so far), or None."""
    reason = _shared(text, row, kept, translation=False)
    if reason:
        return reason
    if row.question.strip().endswith("?") and not text.strip().endswith("?"):
        return "not_a_question"
    return _shape(text, row.question, REPHRASE_LENGTH, dense=False)


def check_translation(text: str, row: Row, language: str, kept: Sequence[str]) -> str | None:
    """The reason a candidate translation of ``row`` into ``language`` is rejected (``kept``: the row's other
    translations so far), or None."""
    reason = _shared(text, row, kept, translation=True)
    if reason:
        return reason
    scripts = language_script(language)
    letters = _scripts(text)
    if letters and sum(s in scripts for s in letters) < len(letters) / 2:
        return "wrong_script"
    words = normalize(text).split()
    if scripts == LATIN and len(words) >= 3 and sum(w in ENGLISH_WORDS for w in words) >= ENGLISH_SHARE * len(words):
        return "english"
    return _shape(text, row.question, TRANSLATE_LENGTH, dense=bool(DENSE_SCRIPTS & set(scripts)))
