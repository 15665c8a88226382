"""The text family: each rule's exact output, and the rows where a rule must not apply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from laya_robustness.families import build_variants, family_names, get_family
from laya_robustness.families import text as text_family
from laya_robustness.rows import Row

from helpers.rows import unit_row

SEED = 0
NOUL_ONLY = {"noul_frame_true", "noul_frame_decide", "noul_options"}
CHOICE_ONLY = {"option_case", "option_period"}


def make_image(n: int) -> Image.Image:
    arr = (np.arange(32 * 32 * 3).reshape(32, 32, 3) * (n + 3) + 17 * n) % 256
    return Image.fromarray(arr.astype(np.uint8), "RGB")


def make_row(row_id: str, question: str, options, label: int = 0, primitive: str = "choice", **kw) -> Row:
    return unit_row(row_id, **{"images": (make_image(len(row_id)),), **kw, "question": question,
                               "options": tuple(options), "label": label, "primitive": primitive})


def by_variant(row: Row) -> dict[str, Row]:
    out = build_variants("text", [row], SEED)
    names = [r.variant for r in out]
    assert len(names) == len(set(names)), names
    return {r.variant: r for r in out}


CHOICE = make_row("ds/1", "What color is the car?", ("red", "Blue", "NASA", "42"), label=1, context="a hint")
NOUL = make_row("ds/2", "Is the cat on the mat?", ("no", "yes"), label=1, primitive="noul")


def test_registered():
    assert "text" in family_names()
    assert get_family("text").build is text_family.build


def test_choice_row_exact_outputs():
    got = by_variant(CHOICE)
    assert set(got) == {"prefix", "suffix", "double_spaces", "first_case", "end_punct", "option_case", "option_period"}
    assert got["prefix"].question == "Question: What color is the car?"
    assert got["suffix"].question == "What color is the car? Choose the correct option."
    assert got["double_spaces"].question == "What  color  is  the  car?"
    assert got["first_case"].question == "what color is the car?"
    assert got["end_punct"].question == "What color is the car"
    assert got["option_case"].options == ("Red", "blue", "NASA", "42")
    assert got["option_period"].options == ("red.", "Blue.", "NASA.", "42.")
    question_rules = {"prefix", "suffix", "double_spaces", "first_case", "end_punct"}
    for name in question_rules:
        assert got[name].options == CHOICE.options
    for name in CHOICE_ONLY:
        assert got[name].question == CHOICE.question


def test_noul_row_exact_outputs():
    got = by_variant(NOUL)
    assert set(got) == {"prefix", "suffix", "double_spaces", "first_case", "end_punct"} | NOUL_ONLY
    assert got["first_case"].question == "is the cat on the mat?"
    assert got["end_punct"].question == "Is the cat on the mat"
    assert got["noul_frame_true"].question == "Is it true that is the cat on the mat?"
    assert got["noul_frame_decide"].question == "Decide whether the answer to this question is yes: Is the cat on the mat?"
    assert got["noul_options"].options == ("No", "Yes")
    assert got["noul_options"].question == NOUL.question
    for name in ("noul_frame_true", "noul_frame_decide"):
        assert got[name].options == ("no", "yes")


def test_noul_acronym_first_word_and_capitalised_options():
    row = make_row("ds/3", "NASA built the rocket.", ("No", "Yes"), label=0, primitive="noul")
    got = by_variant(row)
    assert "first_case" not in got
    assert got["end_punct"].question == "NASA built the rocket"
    assert got["noul_frame_true"].question == "Is it true that NASA built the rocket?"
    assert got["noul_frame_decide"].question == "Decide whether the answer to this question is yes: NASA built the rocket."
    assert got["noul_options"].options == ("no", "yes")


@pytest.mark.parametrize("question", ["TV shows are on", "DNA-based life is shown", "U.S. flags are visible"])
def test_first_case_skips_acronyms(question):
    got = by_variant(make_row("ds/4", question, ("a", "b")))
    assert "prefix" in got
    assert "first_case" not in got


@pytest.mark.parametrize("question", ["3 cats are visible", '"Stop" is written here', "  "])
def test_first_case_skips_non_letter_start(question):
    got = by_variant(make_row("ds/5", question, ("a", "b")))
    assert "prefix" in got
    assert "first_case" not in got


def test_single_letter_first_word_is_not_an_acronym():
    got = by_variant(make_row("ds/6", "A dog runs", ("x", "y")))
    assert got["first_case"].question == "a dog runs"
    assert got["end_punct"].question == "A dog runs?"


def test_end_punct_adds_question_mark_and_drops_period():
    assert by_variant(make_row("ds/7", "Count the cats", ("1", "2")))["end_punct"].question == "Count the cats?"
    assert by_variant(make_row("ds/8", "Count the cats.", ("1", "2")))["end_punct"].question == "Count the cats"
    assert "end_punct" not in by_variant(make_row("ds/9", "?", ("1", "2")))


def test_double_spaces_only_single_spaces_and_none_without_space():
    got = by_variant(make_row("ds/10", "What  is this thing", ("a", "b")))
    assert got["double_spaces"].question == "What  is  this  thing"
    no_space = by_variant(make_row("ds/11", "Colour?", ("red", "green")))
    assert no_space["first_case"].question == "colour?"
    assert "double_spaces" not in no_space


def test_option_case_skips_numbers_acronyms_and_non_letters():
    got = by_variant(make_row("ds/12", "Which one?", ("1", "2.5", "USA", "(a) left", "x-ray")))
    assert got["option_case"].options == ("1", "2.5", "USA", "(a) left", "X-ray")
    assert "option_case" not in by_variant(make_row("ds/13", "How many?", ("1", "2", "3")))
    assert "option_case" not in by_variant(make_row("ds/14", "Which?", ("USA", "UK", "#3")))


def test_option_case_skips_case_colliding_options():
    got = by_variant(make_row("ds/15", "Which fruit?", ("apple", "Apple", "pear")))
    assert "option_period" in got
    assert "option_case" not in got


def test_option_period_only_where_missing():
    got = by_variant(make_row("ds/16", "Which?", ("left.", "right", "3")))
    assert got["option_period"].options == ("left.", "right.", "3.")
    assert "option_period" not in by_variant(make_row("ds/17", "Which?", ("left.", "right.")))


def test_noul_rules_skip_choice_rows_and_choice_rules_skip_noul_rows():
    choice_yes_no = make_row("ds/18", "Is it red?", ("no", "yes"), primitive="choice")
    got = by_variant(choice_yes_no)
    assert got, "the choice row should get the general rules"
    assert not NOUL_ONLY & set(got)
    assert CHOICE_ONLY <= set(got)
    assert not CHOICE_ONLY & set(by_variant(NOUL))


def test_labels_groups_and_clusters_kept_and_row_ids_unique():
    rows = [CHOICE, NOUL]
    out = build_variants("text", rows, SEED)
    assert len(out) == 7 + 8
    assert len({r.row_id for r in out}) == len(out)
    sources = {r.group_id: r for r in rows}
    for r in out:
        src = sources[r.group_id]
        assert r.family == "text"
        assert r.row_id == f"{src.group_id}|text|{r.variant}"
        assert (r.cluster, r.label, r.dataset, r.context, r.primitive) == (
            src.cluster, src.label, src.dataset, src.context, src.primitive)
        assert r.images == src.images
        assert (r.question, r.options) != (src.question, src.options)


def test_deterministic_and_pure():
    rows = [CHOICE, NOUL]
    snapshot = [dataclasses.replace(r) for r in rows]
    first = build_variants("text", rows, SEED)
    second = build_variants("text", rows, SEED)
    other_seed = build_variants("text", rows, SEED + 1)
    assert first
    key = lambda rs: [(r.row_id, r.question, r.options, r.label) for r in rs]  # noqa: E731
    assert key(first) == key(second) == key(other_seed)
    assert [(r.question, r.options) for r in rows] == [(r.question, r.options) for r in snapshot]


def test_acronym_helper():
    assert text_family.is_acronym("TV")
    assert text_family.is_acronym("DNA-based")
    assert text_family.is_acronym("U.S.")
    assert not text_family.is_acronym("A")
    assert not text_family.is_acronym("Dog")
    assert not text_family.is_acronym("42")
