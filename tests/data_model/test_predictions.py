"""Prediction files: round trip, byte-stable output, and errors that name file, line and field."""

import gzip
import json

import pytest

from laya_robustness.predictions import PredictionError, read_predictions, write_predictions


def record(i, **changes):
    base = {
        "row_id": f"d/{i}|text|prefix", "group_id": f"d/{i}", "cluster": f"img{i // 2}", "dataset": "d",
        "family": "text", "variant": "prefix", "primitive": "choice", "label": i % 3,
        "logits": [0.1234, -1.5, 2.0], "probs": [0.2, 0.05, 0.75], "argmax": 2, "meta": {"rule": "prefix"},
    }
    return {**base, **changes}


def write_lines(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def test_round_trip(tmp_path):
    records = [record(i) for i in range(5)] + [record(9, label=-1, primitive="noul", logits=[0, 1], probs=[0.4, 0.6], argmax=1)]
    path = tmp_path / "predictions.jsonl.gz"
    write_predictions(path, records)
    assert read_predictions(path) == records
    assert len(read_predictions(path)) == 6


def test_same_records_give_the_same_bytes(tmp_path):
    records = [record(i) for i in range(4)]
    write_predictions(tmp_path / "a.jsonl.gz", records)
    write_predictions(tmp_path / "b.jsonl.gz", [dict(reversed(list(r.items()))) for r in records])
    a, b = (tmp_path / "a.jsonl.gz").read_bytes(), (tmp_path / "b.jsonl.gz").read_bytes()
    assert len(a) > 20 and a == b
    assert a[4:8] == b"\0\0\0\0"  # gzip mtime


def test_missing_field_names_file_line_and_field(tmp_path):
    bad = record(1)
    del bad["probs"]
    path = tmp_path / "p.jsonl.gz"
    write_lines(path, [json.dumps(record(0)), json.dumps(bad)])
    with pytest.raises(PredictionError) as err:
        read_predictions(path)
    assert f"{path}:2" in str(err.value) and "'probs'" in str(err.value) and "missing" in str(err.value)


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    write_lines(path, [json.dumps(record(0)), "", '{"row_id": "x",'])
    with pytest.raises(PredictionError, match=r"p\.jsonl\.gz:3: .*not valid JSON"):
        read_predictions(path)


@pytest.mark.parametrize(
    "field, value",
    [("label", "1"), ("label", 3), ("argmax", True), ("logits", []), ("probs", [0.5]), ("cluster", ""), ("logits", [1, "x", 2])],
)
def test_bad_field_values_are_named(tmp_path, field, value):
    path = tmp_path / "p.jsonl.gz"
    write_lines(path, [json.dumps(record(0, **{field: value}))])
    with pytest.raises(PredictionError, match=rf":1: field '{field}'"):
        read_predictions(path)


def test_non_object_line_and_non_gzip_file(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    write_lines(path, ["[1, 2]"])
    with pytest.raises(PredictionError, match=":1: field '\\(record\\)'"):
        read_predictions(path)
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_text(json.dumps(record(0)))
    with pytest.raises(PredictionError, match="plain.jsonl.gz"):
        read_predictions(plain)


def test_write_refuses_an_invalid_record(tmp_path):
    with pytest.raises(PredictionError, match="record 1: field 'argmax'"):
        write_predictions(tmp_path / "p.jsonl.gz", [record(0), record(1, argmax=7)])
