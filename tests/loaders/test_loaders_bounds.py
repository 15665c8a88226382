"""Inputs bigger than they look, refused at load naming the file, line and field: an image linked from inside --data
to a file outside it (the rule checked the link, not its target), a TSV header of 10^6 columns (the duplicate check
was quadratic), a text cell past MAX_TEXT_CHARS (a 200 MB question was kept whole, copied into every variant and
written into the reports) and a manifest line past MAX_LINE_BYTES. Real files and links; the gate as a user runs it
exits 4 on them."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from laya_robustness.loaders import LoadSettings, RowErrors, scan_rows
from laya_robustness.loaders.jsonl import MAX_LINE_BYTES
from laya_robustness.loaders.tsv import MAX_COLUMNS
from laya_robustness.loaders.validate import MAX_TEXT_CHARS
from laya_robustness.rows import RowError

ROOT = Path(__file__).resolve().parents[2]


def image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), "red").save(path)
    return path


def manifest(folder: Path, *rows: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "colours.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(i: int = 0, **changes) -> dict:
    return {"row_id": f"colours/{i}", "dataset": "colours", "question": "What colour is it?",
            "options": ["red", "blue"], "label": 0, "images": [f"images/{i}.png"], **changes}


def tsv(path: Path, header: list[str], *lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(cells) for cells in (header, *lines)) + "\n")
    return path


# -- links out of the data directory --------------------------------------------------------------------------


def test_an_image_linked_to_a_file_outside_the_data_is_refused(tmp_path):
    secret = image(tmp_path / "outside" / "secret.png")
    data = tmp_path / "data"
    manifest(data, row(0), row(1))
    image(data / "images" / "0.png")
    (data / "images" / "1.png").symlink_to(secret)
    with pytest.raises(RowErrors) as raised:
        scan_rows(data)
    [problem] = raised.value.problems
    assert str(problem) == (f"{data / 'colours.jsonl'}:2: field 'images[0]': image path 'images/1.png' is a "
                            f"link to {secret}, outside the data directory {data}; pass --allow-outside-data "
                            "yes to read it")
    allowed = scan_rows(data, LoadSettings(allow_outside_data=True))
    assert [len(r.images) for r in allowed["colours"]] == [1, 1]


def test_a_linked_directory_leading_out_is_refused_and_links_within_the_data_are_read(tmp_path):
    outside = image(tmp_path / "outside" / "0.png").parent
    data = tmp_path / "data"
    manifest(data, row(0, images=["linked/0.png"]))
    (data / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RowError, match=r"'images\[0\]': image path 'linked/0.png' is a link to .*outside the data"):
        scan_rows(data)
    inside = image(data / "real" / "0.png")
    (data / "linked").unlink()
    (data / "linked").symlink_to(inside.parent, target_is_directory=True)
    read, = scan_rows(data)["colours"]
    assert read.images[0].file == inside.resolve()  # the target checked is the file read


def test_a_tsv_image_path_linked_out_of_the_data_is_refused(tmp_path):
    secret = image(tmp_path / "outside" / "secret.png")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.png").symlink_to(secret)
    tsv(data / "bench.tsv", ["index", "image_path", "question", "answer", "A", "B"],
        ["1", "x.png", "What colour?", "A", "red", "blue"])
    with pytest.raises(RowError, match=r"bench\.tsv:2: field 'image_path': image path 'x.png' is a link to"):
        scan_rows(data)


# -- a header of a million columns ---------------------------------------------------------------------------


def test_a_tsv_header_of_a_million_columns_is_refused_at_once(tmp_path):
    header = ["index", "image_path", "question", "answer", "A", "B"] + [f"c{i}" for i in range(1_000_000)]
    path = tsv(tmp_path / "wide.tsv", header, ["1", "x.png", "What colour?", "A", "red", "blue"] + [""] * 1_000_000)
    started = time.monotonic()
    with pytest.raises(RowErrors) as raised:
        scan_rows(path)
    assert time.monotonic() - started < 5
    [problem] = raised.value.problems
    assert str(problem) == (f"{path}:1: field '<header>': 1,000,006 columns, over the limit of "
                            f"{MAX_COLUMNS:,} (a VLMEvalKit TSV has a dozen or two)")


def test_a_column_given_twice_is_found_in_a_header_at_the_bound(tmp_path):
    header = ["index", "image_path", "question", "answer", "A", "B"] + [f"c{i}" for i in range(MAX_COLUMNS - 7)]
    path = tsv(tmp_path / "wide.tsv", header + ["c0"])
    with pytest.raises(RowError, match=r"wide\.tsv:1: field 'c0': column given twice in the header"):
        scan_rows(path)


# -- text fields past the bound -------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, named", [
    ("question", "Q" * (MAX_TEXT_CHARS + 1), "question"),
    ("context", "C" * (MAX_TEXT_CHARS + 1), "context"),
    ("options", ["red", "B" * (MAX_TEXT_CHARS + 1)], "options[1]"),
    ("row_id", "r" * (MAX_TEXT_CHARS + 1), "row_id"),
])
def test_a_manifest_text_field_past_the_bound_is_refused(tmp_path, field, value, named):
    data = tmp_path / "data"
    manifest(data, row(0, **{field: value}))
    image(data / "images" / "0.png")
    with pytest.raises(RowErrors) as raised:
        scan_rows(data)
    [problem] = raised.value.problems
    assert str(problem) == (f"{data / 'colours.jsonl'}:1: field '{named}': {MAX_TEXT_CHARS + 1:,} characters, "
                            f"over the limit of {MAX_TEXT_CHARS:,} for a text field (far longer than any real "
                            "question, option or context)")


def test_a_tsv_question_of_20_mb_is_refused_naming_its_line_and_column(tmp_path):
    image(tmp_path / "x.png")
    path = tsv(tmp_path / "bench.tsv", ["index", "image_path", "question", "answer", "A", "B"],
               ["1", "x.png", "What colour?", "A", "red", "blue"],
               ["2", "x.png", "What colour is it? " * 1_000_000, "A", "red", "blue"])
    started = time.monotonic()
    with pytest.raises(RowError, match=r"bench\.tsv:3: field 'question': 19,000,000 characters, over the limit"):
        scan_rows(path)
    assert time.monotonic() - started < 5


def test_a_manifest_line_past_the_bound_is_refused_unparsed(tmp_path):
    data = tmp_path / "data"
    manifest(data, row(0), row(1, meta={"padding": "x" * MAX_LINE_BYTES}))
    image(data / "images" / "0.png")
    with pytest.raises(RowError, match=rf"colours\.jsonl:2: field '<json>': a line over {MAX_LINE_BYTES:,} bytes"):
        scan_rows(data)


def test_a_text_at_the_bound_is_read(tmp_path):
    data = tmp_path / "data"
    manifest(data, row(0, question="Q" * MAX_TEXT_CHARS))
    image(data / "images" / "0.png")
    assert len(scan_rows(data)["colours"][0].row.question) == MAX_TEXT_CHARS


# -- the gate as a user runs it -------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["link", "question"])
def test_the_gate_refuses_such_data_with_exit_4_before_scoring(tmp_path, fault):
    data = tmp_path / "data"
    if fault == "link":
        manifest(data, row(0), row(1))
        image(data / "images" / "0.png")
        (data / "images" / "1.png").symlink_to(image(tmp_path / "outside" / "secret.png"))
        words = "field 'images[0]': image path 'images/1.png' is a link to"
    else:
        manifest(data, row(0), row(1, question="What colour is it? " * 100_000))
        image(data / "images" / "0.png")
        image(data / "images" / "1.png")
        words = "field 'question': 1,900,000 characters, over the limit of 100,000"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p",
                             "no:randomly", "--data", str(data), "--rows-per-set", "1", "--families", "option_order",
                             "--report-dir", str(tmp_path / "reports")], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 4, out[-3000:]
    assert f"{data / 'colours.jsonl'}:2: {words}" in out
    assert not (tmp_path / "reports" / "predictions.jsonl.gz").exists()
