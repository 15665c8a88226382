"""form_choice and negation: the same judgment asked in another question form (no randomness).

form_choice (the other primitive):

- ``as_choice`` (noul rows): asked as a two-option choice row, ``primitive="choice"``,
  options ("no", "yes"), same label.
- ``as_noul_<i>`` (choice rows, one per option i): "Is the answer to this question
  '<option i>'? <question>" as a noul row, options ("no", "yes"), label 1 if i is the gold
  option else 0. meta: ``source_option`` (i) and ``k`` (the number of options).

negation (noul rows, label flipped: 1 - label; meta ``negated``: True):

- ``neg_decide``: "Decide whether the answer to this question is no: <question>".
- ``neg_false``: "Is it false that <question>?", the question's first letter lower-cased
  (unless its first word is an acronym, as in text's noul_frame_true) and its final ?/.
  removed. A question that is empty once stripped gets neither variant.

Every variant keeps the source meta keys, group_id, cluster, images and context, and shows
its options in label order. The seed is unused.
"""

from __future__ import annotations

from typing import Sequence

from laya_robustness.families import Family, declare
from laya_robustness.families.text import is_plain_word, strip_end
from laya_robustness.metrics.extensions import form_choice_cell, negation_cell
from laya_robustness.metrics.headline import ACC
from laya_robustness.rows import Row

FORM_CHOICE = "form_choice"
NEGATION = "negation"
NOUL_OPTIONS = ("no", "yes")
DECIDE_NO = "Decide whether the answer to this question is no: "


def _as_choice(row: Row) -> Row:
    return row.derive(FORM_CHOICE, "as_choice", primitive="choice", options=NOUL_OPTIONS, display_order=None)


def as_noul_question(option: str, question: str) -> str:
    """The yes/no question that asks whether ``option`` answers ``question``."""
    return f"Is the answer to this question '{option}'? {question.strip()}"


def _as_noul(row: Row) -> list[Row]:
    k = len(row.options)
    return [
        row.derive(
            FORM_CHOICE,
            f"as_noul_{i}",
            primitive="noul",
            question=as_noul_question(option, row.question),
            options=NOUL_OPTIONS,
            label=int(i == row.label),
            display_order=None,
            meta={**row.meta, "source_option": i, "k": k},
        )
        for i, option in enumerate(row.options)
    ]


def build_form_choice(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every noul row as a no/yes choice row and every choice row as one noul row per option."""
    out: list[Row] = []
    for row in rows:
        if row.primitive == "noul":
            out.append(_as_choice(row))
        elif row.primitive == "choice":
            out.extend(_as_noul(row))
    return out


def false_question(question: str) -> str | None:
    """"Is it false that <question>?" with the first letter lowered (not for acronyms); None if empty."""
    body = strip_end(question).strip()
    if not body:
        return None
    if is_plain_word(body):
        body = body[0].lower() + body[1:]
    return f"Is it false that {body}?"


def _negated(row: Row, variant: str, question: str) -> Row:
    meta = {**row.meta, "negated": True}
    return row.derive(NEGATION, variant, question=question, label=1 - row.label, display_order=None, meta=meta)


def build_negation(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every noul row under the two negated frames, its label flipped."""
    out = []
    for row in rows:
        false_q = false_question(row.question) if row.primitive == "noul" and row.label in (0, 1) else None
        if false_q is not None:
            out.append(_negated(row, "neg_decide", DECIDE_NO + row.question.strip()))
            out.append(_negated(row, "neg_false", false_q))
    return out


declare(Family(
    name=FORM_CHOICE, row_wise=True, build=build_form_choice, kind="form", block="form", variants=("as_choice", "as_noul_*"),
    reads_pixels=False,
    meta_keys={"as_noul_*": ("source_option", "k")}, headline=(ACC,), checks=("min_acc",), cell=form_choice_cell,
    summary="the judgment in the other primitive (yes/no as a choice; a choice as k yes/no rows)",
    title="question form",
))
declare(Family(
    name=NEGATION, row_wise=True, build=build_negation, kind="form", block="form", variants=("neg_decide", "neg_false"),
    reads_pixels=False,
    meta_keys={"*": ("negated",)}, headline=(ACC,), checks=("min_acc",), cell=negation_cell,
    summary="a negated yes/no frame with the label flipped", title="negation",
))
