"""A run of fewer rows (``--rows-per-set``) asks the rows it has the questions the run of every row asks them: every
family's variants of a sampled row are the same (images, options, label, meta), drawn from the dataset's whole row
set (``families.row_set``) where a family draws from other rows."""

import json
from pathlib import Path

import pytest

from laya_robustness.families import build_variants, declared
from laya_robustness.families.row_set import RowSet, SampledRows
from laya_robustness.rows import image_digest
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.image_store import ImageStore

from helpers.fixture_data import first_rows

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ("colour_choice", "exists_yesno")
N_ROWS, SAMPLED, SEED = 16, 5, 0
QUESTION_FAMILIES = [f.name for f in declared() if f.source == "rows" and f.name != "orig"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The first 16 rows of two fixture sets (a choice set and a yes/no set), with their images."""
    return first_rows(tmp_path_factory.mktemp("row-set"), DATASETS, N_ROWS)


def question(row) -> tuple:
    """What a variant row asks: its ids, text, options, label, order, meta and its images' content keys."""
    return (row.row_id, row.group_id, row.cluster, row.family, row.variant, row.question, row.options, row.label,
            row.display_order, row.context, json.dumps(dict(row.meta), sort_keys=True, default=str),
            tuple(image_digest(im) for im in row.images))


def built(family: str, rows_by_dataset: dict) -> dict:
    return {question(v)[0]: question(v) for rows in rows_by_dataset.values()
            for v in build_variants(family, rows, SEED)}


@pytest.mark.parametrize("store", [False, True], ids=["decoded", "waiting"])
@pytest.mark.parametrize("family", QUESTION_FAMILIES)
def test_a_sampled_row_gets_the_variants_the_run_of_every_row_gives_it(data, family, store):
    full = load_source_rows(data, 0, SEED, store=ImageStore() if store else None)
    sampled = load_source_rows(data, SAMPLED, SEED, store=ImageStore() if store else None)
    groups = {r.group_id for rows in sampled.values() for r in rows}
    assert all(len(rows) == SAMPLED for rows in sampled.values())
    expected = {k: v for k, v in built(family, full).items() if v[1] in groups}
    assert built(family, sampled) == expected


@pytest.mark.parametrize("family", ["image_shuffle", "abstain"])
def test_without_the_row_set_the_sample_would_be_asked_other_questions(data, family):
    """The test above tells: on these rows, a family that reads the row set draws other donors from the sample alone
    (what a run of fewer rows asked before it carried its row set). (The fixture sets offer the same options in
    every row, so option_set borrows no distractor from them: below, rows that do.)"""
    full = load_source_rows(data, 0, SEED)
    sampled = load_source_rows(data, SAMPLED, SEED)
    alone = {name: list(rows) for name, rows in sampled.items()}  # a plain list: no row set
    assert all(isinstance(rows, SampledRows) for rows in sampled.values())
    groups = {r.group_id for rows in sampled.values() for r in rows}
    expected = {k: v for k, v in built(family, full).items() if v[1] in groups}
    assert built(family, alone) != expected


def test_option_set_borrows_its_distractor_from_the_whole_row_set():
    from laya_robustness.rows import Row

    rows = [Row(f"d/{i}", "d", f"d/{i}", f"d/c{i}", (), "Which?", (f"a{i}", f"b{i}", f"c{i}"), 0) for i in range(12)]
    row_set = RowSet.of(rows)["d"]
    sample = rows[5:7]
    whole = {v.row_id: v.options for v in build_variants("option_set", rows, SEED)}
    narrowed = {v.row_id: v.options for v in build_variants("option_set", sample, SEED, row_set)}
    assert narrowed == {k: v for k, v in whole.items() if k.split("|")[0] in {"d/5", "d/6"}}
    alone = {v.row_id: v.options for v in build_variants("option_set", sample, SEED)}
    assert alone != narrowed  # drawn from the two rows alone, the distractors differ


def test_the_full_row_set_draws_what_the_rows_alone_draw(data):
    """On every row, the row set changes nothing: the same donors, images and distractors as the rows alone."""
    full = load_source_rows(data, 0, SEED)
    for family in ("image_shuffle", "abstain", "option_set"):
        assert built(family, full) == built(family, {n: list(rows) for n, rows in full.items()})


def test_a_donor_outside_the_sample_is_read_only_when_asked_for_and_waits_in_the_store(data):
    store = ImageStore()
    sampled = load_source_rows(data, SAMPLED, SEED, store=store)["colour_choice"]
    own = {r.row_id for r in sampled}
    outside = {c: rid for c, rid in sampled.row_set.image_clusters.items() if rid not in own}
    assert outside, "some cluster's first row is outside the sample"
    assert sampled.row_set._loaded == {}  # nothing read before a family asks
    shuffled = build_variants("image_shuffle", sampled, SEED)
    donors = {v.meta["donor_cluster"] for v in shuffled}
    assert set(sampled.row_set._loaded) == {sampled.row_set.image_clusters[d] for d in donors}
    assert all(type(im).__name__ == "PendingImage" for v in shuffled for im in v.images)


def test_a_row_set_refuses_a_row_of_another_dataset():
    from laya_robustness.rows import Row

    row = Row("b/1", "b", "b/1", "b/c", (), "Which?", ("x", "y"), 0)
    with pytest.raises(ValueError, match="row set of dataset 'a' given row 'b/1' of 'b'"):
        RowSet("a", [(row, False)], lambda rid: ())


def test_sampled_rows_travel_as_a_list_without_their_row_set(data):
    import pickle

    sampled = load_source_rows(data, SAMPLED, SEED)["colour_choice"]
    again = pickle.loads(pickle.dumps(sampled))
    assert type(again) is list and [r.row_id for r in again] == [r.row_id for r in sampled]
