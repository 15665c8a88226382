"""Families that declare ``reads_pixels=False`` build, on rows whose images wait undecoded, the very rows they
build on decoded rows (so the run builds them without decoding a whole dataset); those that read pixels get
decoded rows from ``build_variants``, and a PendingImage handed to a pixel operation says what is wrong."""

import dataclasses

import pytest
from PIL import Image

from laya_robustness.families import build_variants, declared, get_family
from laya_robustness.recipes.fixture_captions import generate_captions
from laya_robustness.rows import PendingImage, Row, image_digest
from laya_robustness.run.pipeline.image_store import ImageSource, ImageStore, rows_with_pixels

from helpers.rows import row_content

PIXEL_FREE = [f.name for f in declared() if not f.reads_pixels]


def waiting(rows, store):
    """The rows with each image as a PendingImage of ``store`` (made again from a copy when let go)."""
    def wait(im):
        return ImageSource(store, lambda: [im.copy()], "a test image").waiting(im)

    return [dataclasses.replace(r, images=tuple(wait(im) for im in r.images)) for r in rows]


def test_the_families_that_only_move_images_say_so():
    assert {"orig", "option_order", "text", "image_shuffle", "option_set", "abstain", "text_only"} <= set(PIXEL_FREE)
    assert {"image", "shift", "pad_crop", "overlay", "inject_image", "rotation"}.isdisjoint(PIXEL_FREE)


@pytest.mark.parametrize("family", PIXEL_FREE)
def test_a_pixel_free_family_builds_the_same_rows_on_waiting_images(family, firing_rows):
    source = generate_captions(12, seed=3) if get_family(family).source == "captions" else firing_rows
    store = ImageStore(max_bytes=0)  # holds nothing: every image waits
    built = build_variants(family, waiting(source, store), seed=7)
    assert built and all(isinstance(im, PendingImage) for v in built for im in v.images)
    assert store.stats["made"] == 0  # building read no pixel
    expected = build_variants(family, source, seed=7)
    assert [row_content(v) for v in rows_with_pixels(built)] == [row_content(v) for v in expected]


def test_a_pixel_family_is_given_decoded_rows(firing_rows):
    store = ImageStore(max_bytes=0)
    built = build_variants("image", waiting(firing_rows[:3], store), seed=7)
    expected = build_variants("image", firing_rows[:3], seed=7)
    assert [row_content(v) for v in built] == [row_content(v) for v in expected]
    assert store.stats["made"] == 3  # one image per row, decoded for the builder


def test_a_pending_image_says_it_holds_no_pixels():
    image = Image.new("RGB", (4, 3), "red")
    pending = PendingImage(image_digest(image), "RGB", (4, 3), lambda digest: image)
    assert image_digest(pending) == image_digest(image) and pending.size == (4, 3)
    with pytest.raises(AttributeError, match="holds no pixels.*reads_pixels=True"):
        pending.convert("L")
    row = Row("r", "d", "r", "r", (pending,), "q?", ("a", "b"), 0)
    assert rows_with_pixels([row])[0].images[0] is image
