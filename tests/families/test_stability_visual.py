"""The visual stability families: exact pixels against plain numpy / PIL references, sizes, skips and meta."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from laya_robustness.families import build_variants, get_family
from laya_robustness.families import overlay, pad_crop, rotation, scale, shift
from laya_robustness.rows import Row

from helpers.rows import unit_row

SEED = 0
VISUAL = ("shift", "pad_crop", "scale", "scale_pad", "rotation", "rotation_sweep", "overlay")


def make_image(n: int, size=(64, 48)) -> Image.Image:
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * (5 + n)) % 256, (yy * (9 + n)) % 256, (xx + yy + 30 * n) % 256], axis=-1)
    return Image.fromarray(arr.astype(np.uint8), "RGB")


def make_row(row_id: str, images, **kw) -> Row:
    return unit_row(row_id, **{"question": "Is there a red circle?", "options": ("no", "yes"), "label": 1,
                               "primitive": "noul", "meta": {"source": "unit"}, **kw, "images": tuple(images)})


ONE = make_row("ds/1", [make_image(0)])
TWO = make_row("ds/2", [make_image(1), make_image(2, size=(40, 30))])
TINY = make_row("ds/3", [make_image(3, size=(20, 20))])
NONE = make_row("ds/4", [])
ROWS = [ONE, TWO, TINY, NONE]


def by_variant(family: str, rows=ROWS) -> dict[tuple[str, str], Row]:
    return {(r.group_id, r.variant): r for r in build_variants(family, rows, SEED)}


def px(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


@pytest.mark.parametrize("family", VISUAL)
def test_rows_keep_everything_but_the_images_and_are_deterministic(family):
    out = build_variants(family, ROWS, SEED)
    again = build_variants(family, ROWS, seed=123)
    assert out and len({r.row_id for r in out}) == len(out)
    assert [r.row_id for r in out] == [r.row_id for r in again]
    assert all(np.array_equal(px(a), px(b)) for r, s in zip(out, again) for a, b in zip(r.images, s.images))
    sources = {r.group_id: r for r in ROWS}
    for r in out:
        src = sources[r.group_id]
        assert r.family == family and get_family(family).knows_variant(r.variant)
        assert (r.cluster, r.question, r.options, r.label, r.primitive) == (
            src.cluster, src.question, src.options, src.label, src.primitive)
        assert r.meta["source"] == "unit" and "image_op" in r.meta
        assert len(r.images) == len(src.images) and all(im.mode == "RGB" for im in r.images)
    assert not [r for r in out if r.group_id == "ds/4"], "a row without images gets no variant"
    assert "image_op" not in ONE.meta


def test_shift_is_numpy_roll_along_x():
    out = by_variant("shift")
    assert {v for g, v in out if g == "ds/1"} == {"shift_m16", "shift_m12", "shift_m8", "shift_m4",
                                                 "shift_p4", "shift_p8", "shift_p12", "shift_p16"}
    for n in shift.OFFSETS:
        row = out[("ds/2", shift.variant_name(n))]
        for got, src in zip(row.images, TWO.images):
            assert np.array_equal(px(got), np.roll(px(src), n, axis=1))
        assert row.meta["image_op"] == {"op": "shift", "dx": n, "cyclic": True}
    # content moves right for n > 0: column 0 lands on column 4
    assert np.array_equal(px(out[("ds/1", "shift_p4")].images[0])[:, 4], px(ONE.images[0])[:, 0])


def test_shift_of_an_image_narrower_than_the_offset_wraps():
    narrow = make_row("ds/n", [make_image(5, size=(12, 10))])
    row = by_variant("shift", [narrow])[("ds/n", "shift_p16")]
    assert np.array_equal(px(row.images[0]), np.roll(px(narrow.images[0]), 4, axis=1))


def test_pad_adds_black_borders_and_crop_cuts_the_margin():
    out = by_variant("pad_crop")
    for n in (4, 8, 12, 16):
        row = out[("ds/1", f"pad{n}")]
        got, src = px(row.images[0]), px(ONE.images[0])
        assert row.images[0].size == (64 + 2 * n, 48 + 2 * n)
        assert np.array_equal(got[n:-n, n:-n], src)
        border = np.ones(got.shape[:2], bool)
        border[n:-n, n:-n] = False
        assert not got[border].any()
        assert row.meta["image_op"] == {"op": "pad", "n": n, "fill": [0, 0, 0]}
    for n in (4, 8, 12):
        row = out[("ds/2", f"crop{n}")]
        for got, src in zip(row.images, TWO.images):
            assert np.array_equal(px(got), px(src)[n:-n, n:-n])
        assert row.meta["image_op"]["boxes"] == [[n, n, 64 - n, 48 - n], [n, n, 40 - n, 30 - n]]


def test_a_crop_that_would_leave_nothing_is_skipped():
    out = by_variant("pad_crop")
    # 20 x 20: crop8 keeps 4 px, crop12 and crop16 would leave nothing
    assert {v for g, v in out if g == "ds/3"} == {"crop4", "crop8", "pad4", "pad8", "pad12", "pad16"}
    assert out[("ds/3", "crop8")].images[0].size == (4, 4)
    # 40 x 30 (the second image of ds/2): crop16 would leave nothing in height, so the row gets no crop16
    assert ("ds/2", "crop12") in out and ("ds/2", "crop16") not in out
    assert pad_crop.crop_box((33, 40), 16) == (16, 16, 17, 24)
    assert pad_crop.crop_box((32, 40), 16) is None
    with pytest.raises(ValueError, match="leaves nothing"):
        pad_crop.crop_image(make_image(0, size=(10, 10)), 5)


def test_scale_is_a_bicubic_resize_by_0_9():
    out = by_variant("scale")
    row = out[("ds/2", "scale90")]
    assert [im.size for im in row.images] == [(58, 43), (36, 27)]
    ref = TWO.images[1].resize((36, 27), Image.Resampling.BICUBIC)
    assert np.array_equal(px(row.images[1]), px(ref))
    assert row.meta["image_op"] == {"op": "scale", "factor": 0.9, "resample": "bicubic"}


@pytest.mark.parametrize("name, fill", [("scale90_pad_black", 0), ("scale90_pad_white", 255)])
def test_scale_pad_centres_the_scaled_image_on_a_canvas_of_the_old_size(name, fill):
    row = by_variant("scale_pad")[("ds/1", name)]
    got = px(row.images[0])
    assert row.images[0].size == ONE.images[0].size
    small = px(ONE.images[0].resize((58, 43), Image.Resampling.BICUBIC))
    x, y = (64 - 58) // 2, (48 - 43) // 2
    assert row.meta["image_op"]["offsets"] == [[x, y]] and row.meta["image_op"]["fill"] == [fill] * 3
    assert np.array_equal(got[y:y + 43, x:x + 58], small)
    mask = np.ones(got.shape[:2], bool)
    mask[y:y + 43, x:x + 58] = False
    assert (got[mask] == fill).all()
    canvas, offset = scale.padded(ONE.images[0], (fill,) * 3)
    assert offset == (x, y) and np.array_equal(px(canvas), got)


def test_rotation_expands_the_canvas_and_fills_black():
    out = by_variant("rotation")
    assert {v for g, v in out if g == "ds/1"} == {"rot_m30", "rot_p30"}
    for name, angle in rotation.DEFAULT_ANGLES.items():
        row = out[("ds/1", name)]
        w, h = row.images[0].size
        a = math.radians(30)
        assert abs(w - (64 * math.cos(a) + 48 * math.sin(a))) <= 2 and abs(h - (64 * math.sin(a) + 48 * math.cos(a))) <= 2
        got = px(row.images[0])
        assert not got[0, 0].any() and not got[-1, -1].any(), "the corners the canvas gained are black"
        ref = ONE.images[0].rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=(0, 0, 0))
        assert np.array_equal(got, px(ref))
        assert row.meta["image_op"]["angle"] == angle


def test_positive_angles_turn_counter_clockwise():
    marked = np.zeros((48, 64, 3), np.uint8)
    marked[:6, :6] = 255  # a white block in the top-left corner
    out = by_variant("rotation", [make_row("ds/m", [Image.fromarray(marked)])])

    def block_centre(variant):
        ys, xs = np.nonzero(px(out[("ds/m", variant)].images[0])[:, :, 0] > 128)
        return xs.mean(), ys.mean()

    # counter-clockwise: the top-left corner slides down the left edge, to y ~ 64 sin 30 = 32
    x, y = block_centre("rot_p30")
    assert x < 6 and abs(y - 32) < 5
    # clockwise: it slides along the top edge, to x ~ 48 sin 30 = 24
    x, y = block_centre("rot_m30")
    assert y < 6 and abs(x - 24) < 5


def test_rotation_sweep_angles_and_exact_quarter_turns():
    out = by_variant("rotation_sweep")
    assert [v for g, v in out if g == "ds/1"] == [f"rot{a}" for a in range(30, 360, 30)]
    quarter = out[("ds/1", "rot90")].images[0]
    assert np.array_equal(px(quarter), px(ONE.images[0].transpose(Image.Transpose.ROTATE_90)))
    half = out[("ds/1", "rot180")].images[0]
    assert np.array_equal(px(half), px(ONE.images[0])[::-1, ::-1])
    assert not get_family("rotation_sweep").default and get_family("rotation").default


def test_overlay_writes_each_text_in_red_across_the_centre():
    out = by_variant("overlay")
    assert {v for g, v in out if g == "ds/1"} == set(overlay.TEXTS)
    background = Image.new("RGB", (120, 90), (235, 235, 235))
    plain = make_row("ds/p", [background])
    drawn = by_variant("overlay", [plain])
    for name, text in overlay.TEXTS.items():
        row = drawn[("ds/p", name)]
        got = px(row.images[0])
        changed = np.argwhere((got != 235).any(axis=-1))
        assert changed.size, name
        # only red ink: every changed pixel is the background blended towards pure red
        ink = got[(got != 235).any(axis=-1)]
        assert (ink[:, 0] >= 235).all() and (ink[:, 1] == ink[:, 2]).all() and (ink[:, 1] < 235).all()
        (top, left), (bottom, right) = changed.min(axis=0), changed.max(axis=0)
        assert abs((left + right) / 2 - 60) <= 3 and abs((top + bottom) / 2 - 45) <= 4, name
        assert left >= 0 and right < 120
        size = overlay.font_size(text, (120, 90))
        assert row.meta["image_op"] == {"op": "overlay", "text": text, "colour": [255, 0, 0], "font_sizes": [size]}
        ref = background.copy()
        ImageDraw.Draw(ref).text((60, 45), text, font=ImageFont.load_default(size=size), fill=(255, 0, 0), anchor="mm")
        assert np.array_equal(got, px(ref))
    assert not (px(background) != 235).any(), "the source image is not drawn on"


@pytest.mark.parametrize("text", list(overlay.TEXTS.values()))
@pytest.mark.parametrize("size", [(64, 64), (100, 40), (640, 480), (1024, 1024)])
def test_overlay_font_is_a_tenth_of_the_short_side_fitted_to_the_width(text, size):
    s = overlay.font_size(text, size)
    w, h = size
    assert overlay.MIN_FONT <= s <= max(overlay.MIN_FONT, round(min(w, h) / 10))
    width = ImageFont.load_default(size=s).getlength(text)
    assert width <= w * 0.96 or s == overlay.MIN_FONT
    if s > overlay.MIN_FONT and s < round(min(w, h) / 10):
        assert ImageFont.load_default(size=s + 1).getlength(text) > w * 0.96, "not shrunk more than needed"


def test_every_64px_fixture_row_gets_all_27_default_visual_variants(fixture_rows):
    rows = fixture_rows["count_choice"][:12]
    per_family = {"shift": 8, "pad_crop": 8, "scale": 1, "scale_pad": 2, "rotation": 2, "overlay": 6}
    total = 0
    for family, n in per_family.items():
        out = build_variants(family, rows, SEED)
        assert len(out) == n * len(rows), family
        total += len(out) // len(rows)
    assert total == 27
