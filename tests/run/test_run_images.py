"""The run's image store and the rows whose images wait in it: bounded by bytes, each sampled image decoded once
at load, variants rebuilt when let go, and the same content keys, rows and fingerprints as decoded rows."""

import dataclasses
import json
import threading
import time

import numpy as np
import pytest
from PIL import Image

import laya_robustness.families as families
import laya_robustness.run.pipeline.image_store as images
import laya_robustness.run.pipeline.variant_rows as variants_module
from laya_robustness.families import Family, build_variants, get_family
from laya_robustness.recipes.bench import write_photo_rows
from laya_robustness.rows import PendingImage, Row, RowError, image_digest
from laya_robustness.run.errors import HarnessError
from laya_robustness.run.inputs.fingerprints import data_fingerprint
from laya_robustness.run.pipeline.image_store import ImageStore, image_bytes, rows_with_pixels
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.journal import Journal, row_key
from laya_robustness.run.executors.local import SequentialChunkExecutor
from laya_robustness.run.pipeline.chunks import Scoring, score_journaled
from laya_robustness.run.pipeline.variant_rows import VariantImages, family_variants, variant_digests

from helpers.rows import row_content

SIZE = (40, 30)  # 3,600 bytes decoded


def _image(value: int) -> Image.Image:
    return Image.new("RGB", SIZE, (value, 0, 0))


def test_the_store_holds_what_fits_and_keeps_it_until_let_go():
    store = ImageStore(max_bytes=2 * image_bytes(_image(0)))
    for i in range(3):
        store.put(f"k{i}", _image(i))
    assert store.get("k0") is not None and store.get("k1") is not None  # the first two: held
    assert store.get("k2") is None  # no room: not held, and nothing held was pushed out for it
    assert store.nbytes == store.max_bytes == store.stats["peak_bytes"] and store.stats["hits"] == 2
    store.forget(["k1", "k2"])
    assert store.get("k1") is None and store.nbytes == store.max_bytes // 2
    store.put("k2", _image(2))
    assert store.get("k2") is not None


@pytest.fixture
def photos(tmp_path):
    """Eight photo rows on disk, the last two naming the first one's file (three questions about one image)."""
    manifest = write_photo_rows(tmp_path, 8, size=SIZE)
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    for line in lines[6:]:
        line["images"] = lines[0]["images"]
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


def test_loading_decodes_each_image_once_and_leaves_it_waiting(photos):
    decoded = load_source_rows(photos, 0, seed=0)["photos"]
    store = ImageStore(max_bytes=0)
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    assert store.stats["decoded"] == 6 and store.nbytes == 0  # six distinct files, none held
    assert all(isinstance(im, PendingImage) for r in waiting for im in r.images)
    assert waiting[0].images[0] is waiting[6].images[0]
    assert [image_digest(im) for r in waiting for im in r.images] == [image_digest(im) for r in decoded
                                                                       for im in r.images]
    assert data_fingerprint({"photos": waiting}) == data_fingerprint({"photos": decoded})
    assert [row_key("c", r) for r in waiting] == [row_key("c", r) for r in decoded]
    assert [row_content(r) for r in rows_with_pixels(waiting)] == [row_content(r) for r in decoded]
    assert store.stats["made"] == 6  # each file decoded again once, for all the rows that name it


def test_an_image_that_does_not_decode_stops_the_load(photos):
    (photos / "images" / "photos-00003.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 64)
    with pytest.raises(RowError, match="photos.jsonl:4: field 'images\\[0\\]'"):
        load_source_rows(photos, 0, seed=0, store=ImageStore())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("family", ["image", "pad_crop", "text", "image_shuffle"])
def test_a_familys_waiting_variants_are_its_variants(photos, family, threads, monkeypatch):
    """With a store that holds two images, the image families' variants are let go as they are built and rebuilt
    when their rows are given pixels: the same rows as building on decoded rows, and never more held, whether
    built on one thread (small images) or on the build threads (from PARALLEL_BUILD_MIN_PIXELS a row)."""
    monkeypatch.setattr(images, "BUILD_THREADS", 2)
    monkeypatch.setattr(variants_module, "PARALLEL_BUILD_MIN_PIXELS", 1 if threads > 1 else 10**9)
    streamed = []
    monkeypatch.setattr(variants_module, "streamed_map",
                        lambda fn, items, ahead: streamed.append(ahead) or images.streamed_map(fn, items, ahead))
    decoded = load_source_rows(photos, 0, seed=0)["photos"]
    store = ImageStore(max_bytes=2 * image_bytes(_image(0)))
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    variants = family_variants(family, waiting, seed=3, store=store)
    if get_family(family).reads_pixels:
        assert streamed == [variants_module.BUILD_WINDOW_ROWS if threads > 1 else 1]
    expected = build_variants(family, decoded, seed=3)
    assert [row_key("c", v) for v in variants] == [row_key("c", v) for v in expected]
    assert [row_content(v) for v in rows_with_pixels(variants)] == [row_content(v) for v in expected]
    assert store.stats["peak_bytes"] <= store.max_bytes
    new = {im.digest for v in variants for im in v.images} - {im.digest for r in waiting for im in r.images}
    if get_family(family).reads_pixels:  # the new images (two at most held) were made again by their rows
        assert len(new) > 20 and store.stats["made"] >= len(new) - 2
    else:
        assert not new
    VariantImages(variants, store).all_done()


def test_letting_go_forgets_a_familys_variants_and_keeps_the_source_images(photos):
    store = ImageStore()
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    held = store.nbytes
    variants = family_variants("shift", waiting, seed=0, store=store)
    assert store.nbytes > held
    VariantImages(variants, store).all_done()
    assert store.nbytes == held and all(store.get(im.digest) is not None for r in waiting for im in r.images)


def test_a_variant_image_is_let_go_when_the_last_row_about_it_is_done(photos):
    """An image asked for by rows in two chunks (here the first variant row, scored again at the end) stays held
    after the first chunk and goes with the second; the others go with the first."""
    store = ImageStore()
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    held = store.nbytes
    variants = family_variants("shift", waiting, seed=0, store=store)
    later = variants[:1]
    kept = set(variant_digests(later[0]))
    assert kept and all(store.get(d) is not None for d in kept)
    images = VariantImages([*variants, *later], store)
    images.done(variants)
    assert all(store.get(d) is not None for d in kept)
    assert all(store.get(d) is None for v in variants[1:] for d in set(variant_digests(v)) - kept)
    images.done(later)
    assert store.nbytes == held and not images.waiting


def test_what_the_hf_scorer_keeps_of_a_cells_variant_images_goes_with_their_rows(embedded_scorer, photos, tmp_path):
    """Through ``score_journaled`` and ``VariantImages`` (as the run scores a cell), the scorer keeps no pixels,
    vision features or prompt prefixes of the variant images once their rows are done, whatever the number of
    rows; the source images' stay. Each variant image is encoded once, even where its rows span two chunks."""
    scorer = embedded_scorer.replaced()  # empty caches of its own
    store = ImageStore()
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    scorer.score_batch(rows_with_pixels(waiting))
    source_keys = {image_digest(im) for r in rows_with_pixels(waiting) for im in r.images}
    variants = family_variants("shift", waiting, seed=0, store=store)
    rows = [*variants, *variants[:1]]  # the first variant's image is asked for again by the last chunk
    encoded = scorer.stats["vision_encodes"]
    journal = Journal(tmp_path / "cpu.run.jsonl", "config", {})
    chunks = [list(range(i, min(i + 5, len(rows)))) for i in range(0, len(rows), 5)]
    held: list[int] = []

    def done(scored):
        images.done(scored)
        held.append(len(scorer._feature_store) + len(scorer._prefixes) + len(scorer._pixels))

    images = VariantImages(rows, store, scorer)
    records = score_journaled(SequentialChunkExecutor(Scoring(scorer)), journal, rows, chunks, on_done=done)
    assert len(records) == len(rows) and records[0].logits == records[-1].logits
    new = {d for v in variants for d in variant_digests(v)}
    assert len(new) > 20 and scorer.stats["vision_encodes"] - encoded == len(new)  # none encoded twice
    stores = (scorer._feature_store, scorer._prefixes, scorer._pixels, scorer._layouts)
    kept = {d for store_ in stores for key in store_.keys() for d in _digests_in(key)}
    assert kept and kept <= source_keys
    assert max(held) <= held[-1] + 2 * 5 * 3  # at most a chunk's images (features, prefix, pixels) beyond the end


def _digests_in(key) -> set:
    """The image digests in a store key (nested tuples of strings and token ids)."""
    if isinstance(key, str):
        return {key} if len(key) >= 32 else set()
    if isinstance(key, tuple):
        return set().union(*(_digests_in(k) for k in key)) if key else set()
    return set()


def _unsteady_build(rows, seed):
    """A row-wise family that is not deterministic (it draws from numpy's global state): a bug to catch."""
    return [row.derive("unsteady", "noise", images=tuple(Image.fromarray(
        np.random.randint(0, 255, (4, 4, 3), dtype=np.uint8)) for _ in row.images)) for row in rows]


def _grey_all(rows, seed):
    return [r.derive("grey_all", "grey", images=tuple(im.convert("L") for im in r.images)) for r in rows]


@pytest.fixture
def declared(monkeypatch):
    """Declare a family for one test only."""
    def declare(family: Family) -> None:
        monkeypatch.setitem(families._REGISTRY, family.name, family)

    return declare


def test_a_variant_rebuilt_with_other_pixels_is_a_harness_error(photos, declared):
    declared(Family(name="unsteady", build=_unsteady_build, summary="", row_wise=True, default=False))
    store = ImageStore(max_bytes=0)
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    variants = family_variants("unsteady", waiting, seed=0, store=store)
    with pytest.raises(HarnessError, match="unsteady of row 'photos/00000'.*not deterministic"):
        rows_with_pixels(variants[:1])


def test_a_family_that_reads_pixels_and_is_not_row_wise_is_built_decoded(photos, declared):
    """The rule for such a family (a plug-in's default): the whole dataset decoded, its images held as built."""
    declared(Family(name="grey_all", build=_grey_all, summary="", default=False))
    store = ImageStore(max_bytes=0)
    waiting = load_source_rows(photos, 0, seed=0, store=store)["photos"]
    variants = family_variants("grey_all", waiting, seed=0, store=store)
    assert [v.row_id for v in variants] == [f"{r.group_id}|grey_all|grey" for r in waiting]
    assert all(isinstance(im, Image.Image) and im.mode == "L" for v in variants for im in v.images)


def test_the_hf_scorer_forgets_a_scored_chunks_images_and_scores_them_the_same_again(embedded_scorer, photos):
    """``forget_images`` lets go of the pixels, layouts and prompts kept of the named images (the run calls it on
    a scored chunk's variants) and of nothing else; scoring them again gives the same logits."""
    scorer = embedded_scorer.replaced()  # empty caches of its own
    rows = load_source_rows(photos, 0, seed=0)["photos"][:3]
    before = scorer.score_predict(rows)
    keys = lambda: [scorer._pixels.keys(), scorer._layouts.keys(), scorer._prompts.keys()]  # noqa: E731
    held = keys()
    assert all(len(store) == 3 for store in held)
    scorer.forget_images([image_digest(rows[0].images[0])])
    assert [len(store) for store in keys()] == [2, 2, 2] and [s[1:] for s in held] == keys()
    again = scorer.score_predict(rows)
    assert all(np.array_equal(a, b) for a, b in zip(before, again))
    assert scorer.stats["image_preprocess"] == 4  # only the forgotten image was prepared again


def test_the_prompt_cache_forgets_an_images_prompts_and_its_index_follows_evictions():
    from laya_robustness.scoring.hf import _PromptCache

    cache = _PromptCache(max_entries=2)
    for key in [("q1", (("a",),)), ("q2", (("a", "b"),)), ("q3", (("c",),))]:
        cache.lookup(key, lambda: key[0])
    assert cache.keys() == [("q2", (("a", "b"),)), ("q3", (("c",),))]  # q1 evicted
    assert cache._by_digest == {"a": {("q2", (("a", "b"),))}, "b": {("q2", (("a", "b"),))}, "c": {("q3", (("c",),))}}
    cache.forget(["b"])
    assert cache.keys() == [("q3", (("c",),))] and cache._by_digest == {"c": {("q3", (("c",),))}}


def test_a_ray_actor_tells_its_loaded_scorer_to_forget_images():
    from types import SimpleNamespace

    from laya_robustness.run.executors.ray_actor import ScoringActor

    forgotten: list = []
    actor = ScoringActor({"rows": lambda: Scoring(SimpleNamespace(forget_images=forgotten.append))}, "cpu")
    actor.forget_images("rows", ["d1"])  # its scorer not loaded yet: nothing holds the image
    assert forgotten == []
    actor._scoring("rows")  # loaded, as prepare() does on the actor
    actor.forget_images("rows", ["d1"])
    assert forgotten == [["d1"]]


def test_a_ray_actor_has_malloc_keep_freed_memory_only_when_the_run_does(monkeypatch):
    from laya_robustness.run.executors import ray_actor

    asked: list = []
    monkeypatch.setattr(ray_actor, "keep_malloc_freed_memory", lambda: asked.append(True) or True)
    assert ray_actor.ScoringActor({}, "cpu").keeps_freed_memory is False and asked == []
    assert ray_actor.ScoringActor({}, "cpu", keep_freed_memory=True).keeps_freed_memory is True and asked == [True]
    monkeypatch.setattr(ray_actor, "keep_malloc_freed_memory", lambda: False)  # a C library that is not glibc
    assert ray_actor.ScoringActor({}, "cpu", keep_freed_memory=True).keeps_freed_memory is False


def test_a_streamed_map_keeps_the_order_and_at_most_ahead_results_under_way(monkeypatch):
    monkeypatch.setattr(images, "BUILD_THREADS", 2)
    lock, started, taken, most = threading.Lock(), [], [0], [0]

    def work(x):
        with lock:
            started.append(x)
            most[0] = max(most[0], len(started) - taken[0])  # under way or waiting, not yet taken
        return x * x

    out = []
    for y in images.streamed_map(work, list(range(20)), ahead=3):
        out.append(y)
        taken[0] += 1
    assert out == [x * x for x in range(20)] and most[0] <= 3

    started.clear()
    stream = images.streamed_map(work, list(range(20)), ahead=3)
    assert next(stream) == 0
    stream.close()  # the caller stops: what was not started is cancelled, nothing more starts
    time.sleep(0.05)
    assert len(started) <= 4


def test_replaced_is_dataclasses_replace():
    row = Row("r1", "d", "g", "c", (), "Which?", ("a", "b"), 0, meta={"k": 1}, display_order=(1, 0))
    for changes in ({"images": (_image(1),)}, {"label": 1, "family": "text", "variant": "v"}, {}):
        fast, slow = row.replaced(**changes), dataclasses.replace(row, **changes)
        assert type(fast) is Row and fast is not row
        assert {f.name: getattr(fast, f.name) for f in dataclasses.fields(Row)} == \
            {f.name: getattr(slow, f.name) for f in dataclasses.fields(Row)}
    with pytest.raises(TypeError, match="no field colour"):
        row.replaced(colour="red")
