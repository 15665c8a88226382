"""Image limits: the size is checked from the header before any pixel is decoded, with our message, not Pillow's;
an image cut short is found in the same pass (a PNG's chunks, a JPEG's segments and scans, to their end)."""

import base64
import io
import json
import os
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import pytest
from PIL import Image, ImageFile

import laya_robustness
from laya_robustness.loaders import LoadSettings, RowErrors, load_jsonl, scan_rows
from laya_robustness.loaders.fixes import DAMAGED_IMAGE, LARGE_IMAGE
from laya_robustness.rows import RowError

from helpers.images import cut, encoded

ROOT = Path(__file__).resolve().parents[2]


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
    path = _manifest(tmp_path, cut(encoded("PNG")))
    with pytest.raises(RowError, match=r"s\.jsonl:1: field 'images\[0\]': image .*big\.png is cut short or "
                                       r"damaged: "):
        scan_rows(path)  # found from its chunks, before any pixel is decoded


# -- a bomb, a non-image and truncated images, in one pass ------------------------------------------------------


MANIFEST_IMAGES = {"bomb.png": png_header_only(20_000, 20_000), "junk.png": b"not an image",
                   "cut.png": cut(encoded("PNG")), "cut.jpg": cut(encoded("JPEG")), "whole.jpg": encoded("JPEG")}
TSV_IMAGES = [cut(encoded("PNG")), cut(encoded("JPEG", (640, 480))), encoded("PNG")]


def broken_data(folder: Path) -> Path:
    """A data folder: a manifest naming a bomb, a non-image, a truncated PNG and a truncated JPEG (lines 1-4, a
    whole JPEG on 5), and a TSV holding a truncated PNG and JPEG as base64 (lines 2 and 3, a whole PNG on 4)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (name, data) in enumerate(MANIFEST_IMAGES.items()):
        (folder / name).write_bytes(data)
        lines.append(json.dumps({"row_id": f"s/{i}", "dataset": "s", "images": [name], "question": "Q?",
                                 "options": ["a", "b"], "label": 0}) + "\n")
    (folder / "s.jsonl").write_text("".join(lines))
    cells = [f"{i}\t{base64.b64encode(data).decode()}\tQ?\ta\tb\tA\n" for i, data in enumerate(TSV_IMAGES)]
    (folder / "t.tsv").write_text("index\timage\tquestion\tA\tB\tanswer\n" + "".join(cells))
    return folder


def expected_problems(folder: Path, flag: str = "--max-image-pixels") -> list[tuple[str, str]]:
    """What the report of ``broken_data(folder)`` says, a problem and its fix each, in file and line order (the
    pixel limit's option spelled ``flag``)."""
    manifest, table = folder / "s.jsonl", folder / "t.tsv"
    cut_short = "is cut short or damaged: "
    return [(f"{manifest}:1: field 'images[0]': image {folder}/bomb.png is 400,000,000 pixels, over the limit of "
             f"40,000,000 (raise it with {flag})", LARGE_IMAGE.replace("--max-image-pixels", flag)),
            (f"{manifest}:2: field 'images[0]': cannot identify image {folder}/junk.png: UnidentifiedImageError: ",
             "'images': a list of image paths relative to the manifest, inside the data directory (or leave it out)"),
            (f"{manifest}:3: field 'images[0]': image {folder}/cut.png {cut_short}", DAMAGED_IMAGE),
            (f"{manifest}:4: field 'images[0]': image {folder}/cut.jpg {cut_short}", DAMAGED_IMAGE),
            (f"{table}:2: field 'image': image the {len(TSV_IMAGES[0])}-byte payload {cut_short}", DAMAGED_IMAGE),
            (f"{table}:3: field 'image': image the {len(TSV_IMAGES[1])}-byte payload {cut_short}", DAMAGED_IMAGE)]


def assert_named_together(report: str, folder: Path, flag: str = "--max-image-pixels") -> None:
    """``report`` names every problem of ``broken_data(folder)``, each followed by its fix."""
    lines = report.splitlines()
    assert lines[0] == "6 problems in 2 files:", report
    for problem, fix in expected_problems(folder, flag):
        at = [i for i, line in enumerate(lines) if line.strip().startswith(problem)]
        assert at and lines[at[0] + 1].strip() == f"fix: {fix}", (problem, report)


def test_a_bomb_a_non_image_and_truncated_pngs_and_jpegs_are_named_in_one_pass(tmp_path):
    """Files and base64 cells cut short are found with the other problems, before any pixel is decoded (a
    truncated image was found only when its row was sampled and decoded, one a run)."""
    folder = broken_data(tmp_path / "data")
    with pytest.raises(RowErrors) as info:
        scan_rows(folder)
    expected = expected_problems(folder)
    assert [(str(p)[:len(text)], p.fix) for p, (text, _) in zip(info.value.problems, expected)] == expected
    assert len(info.value.problems) == len(expected)
    assert_named_together(str(info.value), folder)


def test_truncation_is_found_whatever_pillows_load_truncated_images_and_it_is_left_as_it_was(tmp_path, monkeypatch):
    """A caller's ``ImageFile.LOAD_TRUNCATED_IMAGES = True`` (common in training scripts) lets Pillow decode a cut
    image padded with grey; the check does not depend on it, and changes no global of Pillow's."""
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    before = Image.MAX_IMAGE_PIXELS
    folder = broken_data(tmp_path / "data")
    with pytest.raises(RowErrors) as info:
        scan_rows(folder)
    assert [(Path(p.path).name, p.line) for p in info.value.problems if p.fix == DAMAGED_IMAGE] == [
        ("s.jsonl", 3), ("s.jsonl", 4), ("t.tsv", 2), ("t.tsv", 3)]
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True and Image.MAX_IMAGE_PIXELS == before


@pytest.mark.parametrize("fmt, loads", [("PNG", 0), ("JPEG", 0), ("BMP", 1), ("GIF", 1)])
def test_a_png_or_jpeg_is_checked_whole_without_decoding_its_pixels(tmp_path, monkeypatch, fmt, loads):
    """A PNG's chunks (their CRCs) and a JPEG's segments and scans are read to their end, no pixel decoded; an
    image of another format is decoded once (its truncation shows only there)."""
    path = _manifest(tmp_path, encoded(fmt), name=f"x.{fmt.lower()}")
    decoded = []
    real = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self.format) or real(self))
    assert len(scan_rows(path)["s"]) == 1 and len(decoded) == loads
    with pytest.raises(RowErrors, match="is cut short or damaged: "):
        scan_rows(_manifest(tmp_path, cut(encoded(fmt)), name=f"x.{fmt.lower()}"))


@pytest.mark.parametrize("tail", [b"", b"\x00" * 16, b"appended data after the end-of-image marker"])
def test_a_jpeg_with_bytes_after_its_end_is_whole(tmp_path, tail):
    """Data after a JPEG's end-of-image marker (padding, a phone's appended video) is not truncation."""
    path = _manifest(tmp_path, encoded("JPEG") + tail, name="x.jpg")
    assert scan_rows(path)["s"][0].images[0].file.name == "x.jpg"


def test_run_gate_names_them_in_one_usage_error(tmp_path):
    folder = broken_data(tmp_path / "data")
    with pytest.raises(laya_robustness.UsageError) as raised:
        laya_robustness.run_gate(data=folder, families=["option_order"], rows_per_set=1, invariance=False,
                                 report_dir=tmp_path / "reports", root=ROOT)
    assert_named_together(str(raised.value).removeprefix("data: "), folder, flag="max_image_pixels")


def test_the_gate_exits_4_naming_them_together(tmp_path):
    folder = broken_data(tmp_path / "data")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p",
                             "no:randomly", "--data", str(folder), "--rows-per-set", "5", "--families",
                             "option_order", "--report-dir", str(tmp_path / "reports")], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 4, (result.stdout + result.stderr)[-3000:]
    report = result.stderr[result.stderr.index("--data: ") + len("--data: "):]
    assert_named_together(report, folder)
    assert not (tmp_path / "reports" / "predictions.jsonl.gz").exists()


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
