"""Row-wise families: a row's variants depend on that row and the seed alone, so the chunked parallel
build and a report's rebuild of only the rows it shows give the very rows of the whole build."""

import pytest

import laya_robustness.families as families
from laya_robustness.families import build_variants, declared

from helpers.rows import row_content

ROW_WISE = [f.name for f in declared() if f.row_wise]


def test_the_families_that_borrow_from_other_rows_are_not_row_wise():
    assert {"image_shuffle", "option_set", "abstain"}.isdisjoint(ROW_WISE)
    assert {"image", "shift", "overlay", "text", "option_order"} <= set(ROW_WISE)


@pytest.mark.parametrize("family", ROW_WISE)
def test_a_row_wise_family_builds_each_row_alone_as_in_the_whole_set(family, firing_rows, monkeypatch):
    monkeypatch.setattr(families, "BUILD_THREADS", 1)  # the plain sequential build
    whole = build_variants(family, firing_rows, seed=7)
    one_by_one = [v for r in firing_rows for v in build_variants(family, [r], seed=7)]
    assert whole and [v.row_id for v in one_by_one] == [v.row_id for v in whole]
    assert [row_content(v) for v in one_by_one] == [row_content(v) for v in whole]  # every field, images included
    monkeypatch.setattr(families, "BUILD_THREADS", 2)
    monkeypatch.setattr(families, "BUILD_CHUNK_ROWS", 5)
    monkeypatch.setattr(families, "_POOL", [])
    chunked = build_variants(family, firing_rows, seed=7)  # in parallel chunks: the same rows, in order
    assert [row_content(v) for v in chunked] == [row_content(v) for v in whole]
