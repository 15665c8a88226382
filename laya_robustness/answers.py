"""What a record answered and whether it is right, and the normalisation that makes a generated answer
comparable with the accepted ones.

``normalize_answer`` applies, in this order:

1. Unicode NFKC (full-width letters, ligatures and non-breaking spaces become their plain forms);
2. case folding (``str.casefold``: "Yes" and "YES" become "yes");
3. every run of whitespace becomes one space, and the ends are stripped;
4. trailing punctuation is removed: any of ``. , ; : ! ?`` (and spaces between them) at the end,
   so "yes." and "yes !" become "yes" while "3.5" and "e.g. 5" keep their inner dots;
5. one pair of quotes around the whole answer is removed (``"x"``, ``'x'``, ``“x”``, ``‘x’``),
   then step 4 again ("\\"Yes.\\"" becomes "yes");
6. a leading article ("a", "an", "the") followed by more words is removed: "the red car" becomes
   "red car", but a lone "a" (an option letter) stays "a".

Steps 2-4 are the reference's post-processing (case, trailing dots, unneeded white-space); 1, 5
and 6 are this project's additions, for answers that differ only by encoding, quoting or an article.

>>> normalize_answer("  The  Red Car. ")
'red car'
>>> is_accepted('"Yes."', ["yes"]), is_accepted("3.5", ["3"])
(True, False)
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Iterable, Mapping

from laya_robustness.records import OPEN, PredictionError

TRAILING_PUNCTUATION = ".,;:!?"
QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))
ARTICLES = ("a", "an", "the")

_SPACES = re.compile(r"\s+")
_TRAILING = re.compile(rf"[\s{re.escape(TRAILING_PUNCTUATION)}]+$")
_ARTICLE = re.compile(rf"^(?:{'|'.join(ARTICLES)}) (?=\S)")


def _strip_trailing(text: str) -> str:
    return _TRAILING.sub("", text)


def _unquote(text: str) -> str:
    for left, right in QUOTE_PAIRS:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1].strip()
    return text


def normalize_answer(text: str) -> str:
    """The answer in the comparable form described in the module doc (a pure function of ``text``).

    >>> [normalize_answer(t) for t in ("YES", "no.", "A", "an apple", "e.g. 5!", "\u201cMaybe\u201d")]
    ['yes', 'no', 'a', 'apple', 'e.g. 5', 'maybe']
    """
    if not isinstance(text, str):
        raise TypeError(f"an answer must be a string, got {type(text).__name__}: {text!r}")
    out = unicodedata.normalize("NFKC", text).casefold()
    out = _strip_trailing(_SPACES.sub(" ", out).strip())
    out = _strip_trailing(_unquote(out))
    return _ARTICLE.sub("", out)


def is_accepted(answer: str, accepted: Iterable[str]) -> bool:
    """Whether the normalised ``answer`` equals one of the normalised ``accepted`` answers.

    ``accepted`` is a non-string iterable of strings (a bare string is an error, not a list of letters).

    >>> is_accepted("The Eiffel Tower", ["eiffel tower", "tour eiffel"])
    True
    """
    if isinstance(accepted, (str, bytes)) or not isinstance(accepted, Iterable):
        raise TypeError(f"accepted answers must be a list of strings, got {accepted!r}")
    target = normalize_answer(answer)
    return any(target == normalize_answer(a) for a in accepted)


# -- a record's answer --------------------------------------------------------------------------------


def is_scored(record: Mapping[str, Any]) -> bool:
    """Whether the record has a right answer: a label (>= 0), or an open-answer row's accepted answers."""
    return record["label"] >= 0 or record.get("primitive") == OPEN


def is_correct(record: Mapping[str, Any]) -> bool:
    """Whether the record's answer is right: an open row's ``correct`` flag, else argmax == label (a record
    with label -1 that is not an open row is never correct; :func:`is_scored` tells them apart).

    >>> is_correct({"argmax": 1, "label": 1}), is_correct({"argmax": 0, "label": -1})
    (True, False)
    >>> is_correct({"argmax": -1, "label": -1, "primitive": "open", "answer": "red", "correct": False})
    False
    """
    if record.get("primitive") == OPEN or "correct" in record:
        value = record.get("correct")
        if not isinstance(value, bool):
            raise PredictionError(str(record.get("row_id", "?")), "correct", f"expected true or false, got {value!r}")
        return value
    return record["label"] >= 0 and record["argmax"] == record["label"]


def answer_of(record: Mapping[str, Any]):
    """What the model answered: an open row's answer text, normalised (``normalize_answer``: a record the gate
    made holds it normalised, and one written by hand compares the same way), else the argmax (an option index).

    >>> answer_of({"argmax": 2, "label": 1})
    2
    >>> answer_of({"argmax": -1, "label": -1, "primitive": "open", "answer": "Red."})
    'red'
    """
    if record.get("primitive") == OPEN or "answer" in record:
        answer = record["answer"]
        if not isinstance(answer, str):
            raise PredictionError(str(record.get("row_id", "?")), "answer", f"expected a string, got {answer!r}")
        return normalize_answer(answer)
    return record["argmax"]
