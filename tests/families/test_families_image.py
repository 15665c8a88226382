"""The image family: each op's exact pixels and parameters, determinism, and rows without images."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from laya_robustness.families import build_variants, family_names, get_family
from laya_robustness.families import image as image_family
from laya_robustness.rows import Row

from helpers.rows import unit_row

SEED = 0
NAMES = {"jpeg70", "jpeg40", "jpeg20", "crop_center95", "crop_random90", "rescale50", "bright90", "bright110"}


def make_image(n: int, size=(32, 32)) -> Image.Image:
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * (7 + n)) % 256, (yy * (11 + n)) % 256, ((xx * yy) + 40 * n) % 256], axis=-1)
    return Image.fromarray(arr.astype(np.uint8), "RGB")


def make_row(row_id: str, images, **kw) -> Row:
    return unit_row(row_id, **{"question": "What is shown?", "options": ("cat", "dog"), "label": 0,
                               "meta": {"source": "unit"}, **kw, "images": tuple(images)})


ONE = make_row("ds/1", [make_image(0)])
TWO = make_row("ds/2", [make_image(1), make_image(2, size=(40, 30))], context="hint")
NONE = make_row("ds/3", [])
ROWS = [ONE, TWO, NONE]


def variants(rows=ROWS, seed=SEED) -> dict[tuple[str, str], Row]:
    out = build_variants("image", rows, seed)
    return {(r.group_id, r.variant): r for r in out}


def as_array(im: Image.Image) -> np.ndarray:
    return np.asarray(im, dtype=np.int16)


def test_registered():
    assert "image" in family_names()
    assert get_family("image").build is image_family.build


def test_eight_variants_per_row_with_images_none_without():
    out = build_variants("image", ROWS, SEED)
    assert len(out) == 16
    assert {r.variant for r in out if r.group_id == "ds/1"} == NAMES
    assert {r.variant for r in out if r.group_id == "ds/2"} == NAMES
    assert not [r for r in out if r.group_id == "ds/3"]
    assert build_variants("image", [NONE], SEED) == []


def test_rows_keep_group_cluster_text_and_meta_keys():
    out = build_variants("image", ROWS, SEED)
    assert out
    assert len({r.row_id for r in out}) == len(out)
    sources = {r.group_id: r for r in ROWS}
    for r in out:
        src = sources[r.group_id]
        assert r.family == "image"
        assert (r.cluster, r.question, r.options, r.label, r.context) == (
            src.cluster, src.question, src.options, src.label, src.context)
        assert r.meta["source"] == "unit"
        assert r.meta["image_op"]["op"] in {"jpeg", "crop", "rescale", "brightness"}
        assert len(r.images) == len(src.images)
        assert all(im.mode == "RGB" for im in r.images)
    assert "image_op" not in ONE.meta


@pytest.mark.parametrize("quality", [70, 40, 20])
def test_jpeg_matches_a_pil_round_trip(quality):
    got = variants()[("ds/2", f"jpeg{quality}")]
    assert got.meta["image_op"] == {"op": "jpeg", "quality": quality, "subsampling": "4:2:0"}
    assert len(got.images) == 2
    for src, new in zip(TWO.images, got.images):
        buf = io.BytesIO()
        src.save(buf, format="JPEG", quality=quality, subsampling=2)
        expected = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
        assert new.size == src.size
        assert new.tobytes() == expected.tobytes()
        assert new.tobytes() != src.tobytes()


def test_lower_jpeg_quality_loses_more():
    got = variants()
    err = {q: np.abs(as_array(got[("ds/1", f"jpeg{q}")].images[0]) - as_array(ONE.images[0])).mean() for q in (70, 20)}
    assert 0 < err[70] < err[20]


def test_centre_crop_keeps_95_percent_of_the_area():
    got = variants()[("ds/2", "crop_center95")]
    op = got.meta["image_op"]
    assert (op["area"], op["position"]) == (0.95, "center")
    # 32 * sqrt(0.95) = 31.19 -> 31; 40 * sqrt(0.95) = 38.99 -> 39; 30 * sqrt(0.95) = 29.24 -> 29
    assert op["boxes"] == [[0, 0, 31, 31], [0, 0, 39, 29]]
    assert [im.size for im in got.images] == [(31, 31), (39, 29)]
    for src, new, box in zip(TWO.images, got.images, op["boxes"]):
        assert new.tobytes() == src.crop(tuple(box)).tobytes()


def test_centre_crop_box_is_centred():
    # 100 * sqrt(0.95) = 97.47 -> 97, margins 1 / 2; 50 * sqrt(0.95) = 48.73 -> 49, margins 0 / 1
    assert image_family.crop_box((100, 50), 0.95) == (1, 0, 98, 49)
    # 200 -> 195, margins 2 / 3; 120 -> 117, margins 1 / 2
    assert image_family.crop_box((200, 120), 0.95) == (2, 1, 197, 118)


def test_random_crop_keeps_90_percent_and_records_its_boxes():
    got = variants()[("ds/2", "crop_random90")]
    op = got.meta["image_op"]
    assert (op["area"], op["position"]) == (0.9, "random")
    assert len(op["boxes"]) == 2
    # 32 * sqrt(0.9) = 30.36 -> 30; 40 * sqrt(0.9) = 37.95 -> 38; 30 * sqrt(0.9) = 28.46 -> 28
    assert [im.size for im in got.images] == [(30, 30), (38, 28)]
    for src, new, box in zip(TWO.images, got.images, op["boxes"]):
        left, top, right, bottom = box
        assert 0 <= left and 0 <= top and right <= src.width and bottom <= src.height
        assert (right - left, bottom - top) == new.size
        assert new.tobytes() == src.crop(tuple(box)).tobytes()


def test_random_crop_box_depends_on_the_seed():
    boxes = {tuple(variants(seed=s)[("ds/2", "crop_random90")].meta["image_op"]["boxes"][1]) for s in range(8)}
    assert len(boxes) > 1


def test_rescale_down_and_back_bicubic():
    got = variants()[("ds/2", "rescale50")]
    assert got.meta["image_op"] == {"op": "rescale", "factor": 0.5, "resample": "bicubic"}
    assert len(got.images) == 2
    for src, new in zip(TWO.images, got.images):
        half = src.resize((round(src.width / 2), round(src.height / 2)), Image.Resampling.BICUBIC)
        expected = half.resize(src.size, Image.Resampling.BICUBIC)
        assert new.size == src.size
        assert new.tobytes() == expected.tobytes()
        assert new.tobytes() != src.tobytes()


@pytest.mark.parametrize("name,factor", [("bright90", 0.9), ("bright110", 1.1)])
def test_brightness(name, factor):
    got = variants()[("ds/1", name)]
    assert got.meta["image_op"] == {"op": "brightness", "factor": factor}
    expected = ImageEnhance.Brightness(ONE.images[0]).enhance(factor)
    assert got.images[0].tobytes() == expected.tobytes()
    mean_new, mean_src = as_array(got.images[0]).mean(), as_array(ONE.images[0]).mean()
    assert (mean_new < mean_src) if factor < 1 else (mean_new > mean_src)


def test_non_rgb_sources_become_rgb():
    row = make_row("ds/4", [make_image(3).convert("L")])
    out = build_variants("image", [row], SEED)
    assert len(out) == 8
    assert all(r.images[0].mode == "RGB" for r in out)


def test_deterministic_same_seed_identical_bytes():
    first = build_variants("image", ROWS, SEED)
    second = build_variants("image", ROWS, SEED)
    assert len(first) == len(second) == 16
    for a, b in zip(first, second):
        assert (a.row_id, a.meta) == (b.row_id, b.meta)
        assert [im.tobytes() for im in a.images] == [im.tobytes() for im in b.images]
        assert [im.size for im in a.images] == [im.size for im in b.images]


def test_sources_are_not_modified():
    before = [im.tobytes() for im in TWO.images]
    build_variants("image", [TWO], SEED)
    assert [im.tobytes() for im in TWO.images] == before
