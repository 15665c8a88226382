"""Which option a generated answer names: documented, versioned exact rules, no judge model and no random pick.

Rules (version ``EXTRACTION_RULES``), applied to the generated text and the options as the row shows them:

1. The text is normalised as ``answers.normalize_answer`` does (Unicode NFKC, case folded, whitespace runs
   collapsed, final ``. , ; : ! ?`` removed, one pair of enclosing quotes removed, a leading article
   dropped), and one leading ``answer:`` / ``answer is`` (``The answer is B``, ``Answer: B``) is removed.
2. A ``choice`` row's answer names option i when it is
   - its letter: ``B``, ``B.``, ``B)``, ``B:``, ``(B)`` (rule ``letter``);
   - its letter followed by its text: ``B. red``, ``(B) red`` (rule ``letter_text``; a letter followed by
     another option's text or by a text that is no option names nothing);
   - its text alone: ``red`` (rule ``text``), compared after the same normalisation.
3. A ``noul`` row (options ``no`` / ``yes``, shown without letters) is answered by an option's text only
   (``yes``, ``No.``, ``Answer: yes``): rule ``text``.
4. An answer that names no option, or names several (the letter of one and the text of another, or a text
   two options share), is ``unparsed``: it counts as wrong and is compared as its own answer for flips.

>>> extract("Answer: (B)", ("red", "blue", "green"), "choice")
Extraction(index=1, rule='letter')
>>> extract(" Blue.", ("red", "blue", "green"), "choice")
Extraction(index=1, rule='text')
>>> extract("B. green", ("red", "blue", "green"), "choice")
Extraction(index=None, rule='unparsed')
>>> extract("Yes", ("no", "yes"), "noul")
Extraction(index=1, rule='text')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from laya_robustness.answers import normalize_answer
from laya_robustness.records import UNPARSED
from laya_robustness.rows import LETTERS

#: The version of these rules, recorded in the scorer's identity (and so in the journal key and the reports).
EXTRACTION_RULES = "laya-extract-1"
RULES = ("letter", "letter_text", "text", UNPARSED)

_PREFIX = re.compile(r"^answer(?:\s*:|\s+is\s*:?)\s*")
_LETTER = re.compile(r"^\(?([a-z])\)?[.:)]?$")
_LETTER_TEXT = re.compile(r"^(?:\(([a-z])\)|([a-z])[.:)])\s*(.+)$")


@dataclass(frozen=True)
class Extraction:
    """The option an answer names (its index among the shown options), or None, and the rule that decided."""

    index: int | None
    rule: str


def answer_body(text: str) -> str:
    """The answer normalised (rule 1), its ``answer:`` / ``answer is`` prefix removed."""
    return normalize_answer(_PREFIX.sub("", normalize_answer(text), count=1))


def _named(body: str, shown: Sequence[str], lettered: bool) -> dict[int, str]:
    """Every option index the body names, with the rule that names it."""
    texts = [normalize_answer(o) for o in shown]
    named = {i: "text" for i, t in enumerate(texts) if t == body}
    if not lettered:
        return named
    letters = [c.lower() for c in LETTERS[:len(shown)]]
    alone = _LETTER.match(body)
    if alone and alone.group(1) in letters:
        named.setdefault(letters.index(alone.group(1)), "letter")
    with_text = _LETTER_TEXT.match(body)
    if with_text:
        letter, rest = with_text.group(1) or with_text.group(2), normalize_answer(with_text.group(3))
        if letter in letters:
            index = letters.index(letter)
            named.setdefault(index, "letter_text")
            named.update({i: "text" for i, t in enumerate(texts) if t == rest and i != index})
            if texts[index] != rest:
                named[-1] = UNPARSED  # a letter with a text that is not its option's names nothing for sure
    return named


def extract(text: str, shown: Sequence[str], primitive: str) -> Extraction:
    """The shown option ``text`` names by the rules of the module doc, or ``Extraction(None, "unparsed")``."""
    named = _named(answer_body(text), shown, lettered=primitive != "noul")
    if len(named) != 1 or -1 in named:
        return Extraction(None, UNPARSED)
    (index, rule), = named.items()
    return Extraction(index, rule)
