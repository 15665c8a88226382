"""Image limits: the size is checked from the header before any pixel is decoded, with our message, not Pillow's."""

import io
import json
import struct
import warnings
import zlib

import pytest
from PIL import Image

from laya_robustness.loaders import LoadSettings, RowErrors, load_jsonl, scan_rows
from laya_robustness.rows import RowError


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header says width x height, with an empty pixel stream: huge on paper, a few bytes on disk."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def _manifest(tmp_path, image: bytes, name="big.png"):
    (tmp_path / name).write_bytes(image)
    record = {"row_id": "s/0", "dataset": "s", "images": [name], "question": "Q?", "options": ["a", "b"], "label": 0}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


@pytest.mark.parametrize("width, height, size_text", [
    (20_000, 20_000, "400,000,000"),  # over Pillow's own hard limit (it raises DecompressionBombError)
    (10_000, 10_000, "10,000 x 10,000 = 100,000,000"),  # over Pillow's warning limit
    (8_000, 6_000, "8,000 x 6,000 = 48,000,000"),  # under Pillow's limits, over ours
])
def test_an_image_over_the_pixel_limit_is_a_row_error_with_our_message(tmp_path, width, height, size_text):
    path = _manifest(tmp_path, png_header_only(width, height))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's DecompressionBombWarning must not reach the user
        with pytest.raises(RowErrors) as info:
            scan_rows(path)
    [problem] = info.value.problems
    assert str(problem) == (f"{path}:1: field 'images[0]': image {tmp_path}/big.png is {size_text} pixels, over "
                            f"the limit of 40,000,000 (raise it with --max-image-pixels)")


def test_raising_the_limit_admits_the_header_and_restores_pillows_limit(tmp_path):
    before = Image.MAX_IMAGE_PIXELS
    path = _manifest(tmp_path, png_header_only(20_000, 20_000))
    rows = scan_rows(path, LoadSettings(max_image_pixels=400_000_000))
    assert len(rows["s"]) == 1 and rows["s"][0].images[0].max_pixels == 400_000_000
    assert Image.MAX_IMAGE_PIXELS == before
    small = _manifest(tmp_path, png_header_only(20, 20), name="small.png")
    with pytest.raises(RowError, match=r"s\.jsonl:1: field 'images\[0\]': cannot read image .*small\.png"):
        load_jsonl(small)  # the header passes, the empty pixel stream does not decode


def test_the_limit_is_exact(tmp_path):
    image = io.BytesIO()
    Image.new("RGB", (10, 10)).save(image, format="PNG")
    path = _manifest(tmp_path, image.getvalue())
    assert load_jsonl(path, LoadSettings(max_image_pixels=100))[0].images[0].size == (10, 10)
    with pytest.raises(RowError, match="is 10 x 10 = 100 pixels, over the limit of 99 "):
        load_jsonl(path, LoadSettings(max_image_pixels=99))


def test_an_encoded_file_over_the_byte_bound_is_refused_before_reading(tmp_path):
    path = _manifest(tmp_path, b"\x00" * ((1 << 20) + 401))
    with pytest.raises(RowErrors) as info:
        scan_rows(path, LoadSettings(max_image_pixels=100))
    [problem] = info.value.problems
    assert str(problem) == (f"{path}:1: field 'images[0]': the encoded image is 1,048,977 bytes, over the limit "
                            f"of 1,048,976 (4 bytes per pixel of --max-image-pixels 100, plus 1 MiB); raise "
                            f"--max-image-pixels to read it")


def test_garbage_and_truncated_images_are_row_errors(tmp_path):
    path = _manifest(tmp_path, b"not an image at all")
    with pytest.raises(RowError, match=r"s\.jsonl:1: field 'images\[0\]': cannot identify image .*big\.png: "
                                       r"UnidentifiedImageError"):
        scan_rows(path)
    image = io.BytesIO()
    Image.effect_noise((64, 64), 50).convert("RGB").save(image, format="PNG")
    path = _manifest(tmp_path, image.getvalue()[: len(image.getvalue()) // 2])
    with pytest.raises(RowError, match=r"s\.jsonl:1: field 'images\[0\]': cannot read image .*big\.png: OSError"):
        load_jsonl(path)


@pytest.mark.parametrize("size, max_side, expected", [
    ((2048, 1000), 1024, (1024, 500)),  # the stability study's rule: the longest side down to 1024 px
    ((600, 1500), 1024, (410, 1024)),
    ((1024, 300), 1024, (1024, 300)),  # at the limit: kept
    ((2048, 1000), 0, (2048, 1000)),  # 0 keeps every size
])
def test_decoded_images_are_scaled_down_to_the_longest_side(tmp_path, size, max_side, expected):
    image = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(image, format="PNG")
    path = _manifest(tmp_path, image.getvalue())
    (decoded,) = load_jsonl(path, LoadSettings(max_image_side=max_side))[0].images
    assert decoded.size == expected and decoded.mode == "RGB"
    assert decoded.getpixel((expected[0] // 2, expected[1] // 2)) == (200, 30, 30)


def test_the_default_longest_side_is_1024():
    assert LoadSettings().max_image_side == 1024
    with pytest.raises(ValueError, match="max_image_side"):
        LoadSettings(max_image_side=-1)
