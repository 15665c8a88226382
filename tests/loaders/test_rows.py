"""Loaders: JSONL manifests and VLMEvalKit TSV, and errors that name the file, line and field."""

import base64
import io
import json

import pytest
from PIL import Image

from laya_robustness.loaders import load_jsonl, load_tsv
from laya_robustness.loaders import load_rows
from laya_robustness.rows import RowError


def _png(colour=(255, 0, 0)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def _record(**changes):
    record = {"row_id": "s/0", "dataset": "s", "group_id": "s/0", "cluster": "s/img0", "images": ["a.png"],
              "question": "What colour?", "options": ["red", "blue"], "label": 1, "primitive": "choice",
              "context": "Hint.", "category": "c", "meta": {"k": 1}}
    record.update(changes)
    return record


def _manifest(tmp_path, records):
    (tmp_path / "a.png").write_bytes(_png())
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_jsonl_reads_every_field(tmp_path):
    rows = load_jsonl(_manifest(tmp_path, [_record(), _record(row_id="s/1", label=0, context=None)]))
    assert [r.row_id for r in rows] == ["s/0", "s/1"]
    first = rows[0]
    assert (first.dataset, first.group_id, first.cluster) == ("s", "s/0", "s/img0")
    assert first.options == ("red", "blue") and first.label == 1 and first.context == "Hint."
    assert first.images[0].size == (8, 8) and first.images[0].getpixel((0, 0)) == (255, 0, 0)
    assert first.meta == {"k": 1} and first.category == "c" and rows[1].context is None


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"label": 2}, "label"),
        ({"label": "1"}, "label"),
        ({"options": ["only"]}, "options"),
        ({"primitive": "score"}, "primitive"),
        ({"primitive": "noul"}, "options"),
        ({"images": ["missing.png"]}, "images[0]"),
        ({"question": None}, "question"),
    ],
)
def test_jsonl_error_names_file_line_and_field(tmp_path, changes, field):
    path = _manifest(tmp_path, [_record(), _record(row_id="s/1", **changes)])
    with pytest.raises(RowError) as info:
        load_jsonl(path)
    assert info.value.line == 2 and info.value.field_name == field
    assert str(path) in str(info.value) and f":2: field '{field}'" in str(info.value)


def test_jsonl_missing_field_and_bad_json(tmp_path):
    record = _record()
    del record["question"]
    with pytest.raises(RowError, match=r"s\.jsonl:1: field 'question': missing"):
        load_jsonl(_manifest(tmp_path, [record]))
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_record()) + "\n{not json\n")
    with pytest.raises(RowError, match=r":2: field '<json>'"):
        load_jsonl(path)


def _tsv(tmp_path, lines):
    path = tmp_path / "bench.tsv"
    path.write_text("index\timage\tquestion\thint\tA\tB\tC\tD\tanswer\tcategory\n" + "".join(lines))
    return path


def test_tsv_vlmevalkit_rows(tmp_path):
    b64 = base64.b64encode(_png((0, 0, 255))).decode()
    path = _tsv(tmp_path, [f"7\t{b64}\tWhich one?\tA hint.\tcat\tdog\tcow\t\tC\tanimals\n",
                           f"8\t{b64}\tAnd this?\tnan\tx\ty\t\t\tA\tother\n"])
    rows = load_tsv(path)
    assert [r.row_id for r in rows] == ["bench/7", "bench/8"]
    assert rows[0].options == ("cat", "dog", "cow") and rows[0].label == 2 and rows[0].context == "A hint."
    assert rows[1].options == ("x", "y") and rows[1].label == 0 and rows[1].context is None
    assert rows[0].images[0].getpixel((1, 1)) == (0, 0, 255) and rows[0].category == "animals"


def test_tsv_errors_name_line_and_field(tmp_path):
    b64 = base64.b64encode(_png()).decode()
    path = _tsv(tmp_path, [f"1\t{b64}\tQ?\t\ta\tb\t\t\tA\tc\n", f"2\t{b64}\tQ?\t\ta\tb\t\t\tD\tc\n"])
    with pytest.raises(RowError, match=r"bench\.tsv:3: field 'answer'"):
        load_tsv(path)
    path = _tsv(tmp_path, [f"1\tnot-base64!\tQ?\t\ta\tb\t\t\tA\tc\n"])
    with pytest.raises(RowError, match=r"bench\.tsv:2: field 'image'"):
        load_tsv(path)


def test_load_rows_groups_by_dataset(tmp_path):
    _manifest(tmp_path, [_record(), _record(row_id="s/1")])
    by_dataset = load_rows(tmp_path)
    assert list(by_dataset) == ["s"] and len(by_dataset["s"]) == 2
    with pytest.raises(FileNotFoundError):
        load_rows(tmp_path / "nowhere")


def test_sampling_before_decoding_draws_the_same_rows_as_before(fixture_rows):
    from pathlib import Path

    from laya_robustness.run.inputs.run_inputs import load_source_rows, sample_rows

    sampled = load_source_rows(Path(__file__).resolve().parents[2] / "laya_fixtures" / "rows", 5, seed=0)
    for name, rows in fixture_rows.items():
        assert [r.row_id for r in sampled[name]] == [r.row_id for r in sample_rows(rows, 5, seed=0)]
        eager = {r.row_id: r for r in rows}
        assert all(r.images[0].tobytes() == eager[r.row_id].images[0].tobytes() for r in sampled[name])
    # the draw the loader made before rows were sampled ahead of decoding (seed 0, 5 rows)
    assert [r.row_id for r in sampled["colour_choice"]] == [
        "colour_choice/000095", "colour_choice/000150", "colour_choice/000163", "colour_choice/000166",
        "colour_choice/000186"]
