"""The control families: image_shuffle (a seeded derangement over images) and text_only."""

from __future__ import annotations

import pytest

from laya_robustness.families import build_variants, family_names, get_family
from laya_robustness.families import image_shuffle, text_only
from laya_robustness.families.image_shuffle import donor_clusters
from laya_robustness.rows import Row

from helpers.images import gradient_image

SEED = 0
IMAGES = {f"a/c{i}": gradient_image(i, (32, 32)) for i in range(5)} | {"b/c0": gradient_image(9, (32, 32))}


def make_row(row_id: str, dataset: str, cluster: str, with_image: bool = True, **kw) -> Row:
    images = (IMAGES[cluster],) if with_image else ()
    fields = dict(question=f"Question {row_id}?", options=("no", "yes"), label=1, primitive="noul", meta={"k": 1})
    fields.update(kw)
    return Row(row_id=row_id, dataset=dataset, group_id=row_id, cluster=cluster, images=images, **fields)


ROWS = [
    make_row("a/1", "a", "a/c0"),
    make_row("a/2", "a", "a/c0"),  # a sibling question on the same image
    make_row("a/3", "a", "a/c1"),
    make_row("a/4", "a", "a/c2"),
    make_row("a/5", "a", "a/c3"),
    make_row("a/6", "a", "a/c3"),
    make_row("a/7", "a", "a/c4", context="a ScienceQA-style hint"),
    make_row("a/8", "a", "a/none", with_image=False, context="text only"),
    make_row("b/1", "b", "b/c0"),  # dataset b has a single distinct image
    make_row("b/2", "b", "b/c0"),
]
A_CLUSTERS = {f"a/c{i}" for i in range(5)}


def test_registered():
    names = family_names()
    assert {"image_shuffle", "text_only"} <= set(names)
    assert get_family("image_shuffle").build is image_shuffle.build
    assert get_family("text_only").build is text_only.build


# --- image_shuffle -------------------------------------------------------------------------


def test_donors_are_a_derangement_within_the_dataset():
    donors = donor_clusters(ROWS, SEED)
    assert set(donors) == A_CLUSTERS
    assert sorted(donors.values()) == sorted(A_CLUSTERS)  # a permutation
    assert all(donor != cluster for cluster, donor in donors.items())  # with no fixed point


def test_every_row_with_images_gets_its_donors_image():
    out = build_variants("image_shuffle", ROWS, SEED)
    assert [r.group_id for r in out] == ["a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "a/7"]
    donors = donor_clusters(ROWS, SEED)
    for r in out:
        assert (r.family, r.variant, r.row_id) == ("image_shuffle", "shuffle", f"{r.group_id}|image_shuffle|shuffle")
        donor = r.meta["donor_cluster"]
        assert donor == donors[r.cluster]
        assert donor != r.cluster
        assert donor.startswith(r.dataset + "/")
        assert len(r.images) == 1
        assert r.images[0].tobytes() == IMAGES[donor].tobytes()
        assert r.images[0].tobytes() != IMAGES[r.cluster].tobytes()
        assert r.meta["k"] == 1


def test_no_row_gets_its_own_image_through_a_sibling():
    out = build_variants("image_shuffle", ROWS, SEED)
    own_images = {c: {im.tobytes() for r in ROWS if r.cluster == c for im in r.images} for c in A_CLUSTERS}
    assert out
    for r in out:
        assert not own_images[r.cluster] & {im.tobytes() for im in r.images}


def test_all_rows_of_a_cluster_share_one_donor():
    out = build_variants("image_shuffle", ROWS, SEED)
    by_cluster: dict[str, set[str]] = {}
    for r in out:
        by_cluster.setdefault(r.cluster, set()).add(r.meta["donor_cluster"])
    assert set(by_cluster) == A_CLUSTERS
    assert all(len(donors) == 1 for donors in by_cluster.values())
    assert len(by_cluster["a/c0"]) == len(by_cluster["a/c3"]) == 1


def test_single_image_dataset_and_rows_without_images_get_nothing():
    out = build_variants("image_shuffle", ROWS, SEED)
    assert out
    assert not [r for r in out if r.dataset == "b" or r.group_id == "a/8"]
    assert build_variants("image_shuffle", [r for r in ROWS if r.dataset == "b"], SEED) == []
    assert donor_clusters([r for r in ROWS if r.dataset == "b"], SEED) == {}


def test_two_images_swap():
    rows = [make_row("a/1", "a", "a/c0"), make_row("a/3", "a", "a/c1")]
    assert donor_clusters(rows, SEED) == {"a/c0": "a/c1", "a/c1": "a/c0"}


def test_text_kept_and_group_cluster_kept():
    out = build_variants("image_shuffle", ROWS, SEED)
    sources = {r.group_id: r for r in ROWS}
    assert len(out) == 7
    assert len({r.row_id for r in out}) == len(out)
    for r in out:
        src = sources[r.group_id]
        assert (r.cluster, r.question, r.options, r.label, r.context) == (
            src.cluster, src.question, src.options, src.label, src.context)


def test_shuffle_deterministic_and_seed_dependent():
    first = build_variants("image_shuffle", ROWS, SEED)
    second = build_variants("image_shuffle", ROWS, SEED)
    assert len(first) == len(second) == 7
    for a, b in zip(first, second):
        assert (a.row_id, dict(a.meta)) == (b.row_id, dict(b.meta))
        assert [im.tobytes() for im in a.images] == [im.tobytes() for im in b.images]
    maps = {tuple(sorted(donor_clusters(ROWS, s).items())) for s in range(10)}
    assert len(maps) > 1


def test_shuffle_does_not_depend_on_row_order():
    assert donor_clusters(list(reversed(ROWS)), SEED) == donor_clusters(ROWS, SEED)


def test_a_cluster_in_two_datasets_is_an_error():
    rows = [make_row("a/1", "a", "a/c0"), make_row("a/3", "a", "a/c1"), make_row("b/9", "b", "a/c0")]
    with pytest.raises(ValueError, match="a/c0"):
        donor_clusters(rows, SEED)


# --- text_only -----------------------------------------------------------------------------


def test_text_only_removes_images_and_keeps_context():
    out = build_variants("text_only", ROWS, SEED)
    with_images = [r for r in ROWS if r.images]
    assert len(out) == len(with_images) == 9
    assert [r.group_id for r in out] == [r.group_id for r in with_images]
    assert len({r.row_id for r in out}) == len(out)
    sources = {r.group_id: r for r in ROWS}
    for r in out:
        src = sources[r.group_id]
        assert (r.family, r.variant, r.images) == ("text_only", "no_image", ())
        assert (r.cluster, r.question, r.options, r.label, r.context, r.meta) == (
            src.cluster, src.question, src.options, src.label, src.context, src.meta)
    hinted = [r for r in out if r.group_id == "a/7"]
    assert len(hinted) == 1 and hinted[0].context == "a ScienceQA-style hint"


def test_text_only_skips_rows_without_images():
    assert build_variants("text_only", [r for r in ROWS if not r.images], SEED) == []
    out = build_variants("text_only", ROWS, SEED)
    assert out
    assert "a/8" not in {r.group_id for r in out}
