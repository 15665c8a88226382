"""Row-wise families: a row's variants depend on that row and the seed alone, so the chunked parallel
build and a report's rebuild of only the rows it shows give the very rows of the whole build."""

import dataclasses

import pytest

import laya_robustness.families as families
from laya_robustness.families import build_variants, declared
from laya_robustness.recipes.fixture_rows import generate_rows
from test_headline_recompute import _varied, _what_is, _with_user_variants

ROW_WISE = [f.name for f in declared() if f.row_wise]


def _content(row):
    """Every field of a Row (which compares by identity), its images as mode, size and pixel bytes."""
    return tuple((f.name, tuple((im.mode, im.size, im.tobytes()) for im in row.images) if f.name == "images"
                  else getattr(row, f.name)) for f in dataclasses.fields(row))


@pytest.fixture(scope="module")
def rows():
    """Rows on which every variant of every question family fires (as in the headline recomputation)."""
    return (_with_user_variants(_varied(generate_rows("colour_choice", 12, seed=5)))
            + _with_user_variants(generate_rows("exists_yesno", 12, seed=5))
            + generate_rows("count_choice", 6, seed=5) + generate_rows("left_of_yesno", 6, seed=5)
            + _what_is(generate_rows("context_choice", 6, seed=5)))


def test_the_families_that_borrow_from_other_rows_are_not_row_wise():
    assert {"image_shuffle", "option_set", "abstain"}.isdisjoint(ROW_WISE)
    assert {"image", "shift", "overlay", "text", "option_order"} <= set(ROW_WISE)


@pytest.mark.parametrize("family", ROW_WISE)
def test_a_row_wise_family_builds_each_row_alone_as_in_the_whole_set(family, rows, monkeypatch):
    monkeypatch.setattr(families, "BUILD_THREADS", 1)  # the plain sequential build
    whole = build_variants(family, rows, seed=7)
    one_by_one = [v for r in rows for v in build_variants(family, [r], seed=7)]
    assert whole and [v.row_id for v in one_by_one] == [v.row_id for v in whole]
    assert [_content(v) for v in one_by_one] == [_content(v) for v in whole]  # every field, images included
    monkeypatch.setattr(families, "BUILD_THREADS", 2)
    monkeypatch.setattr(families, "BUILD_CHUNK_ROWS", 5)
    monkeypatch.setattr(families, "_POOL", [])
    chunked = build_variants(family, rows, seed=7)  # in parallel chunks: the same rows, in order
    assert [_content(v) for v in chunked] == [_content(v) for v in whole]
