"""A predictions file is read as a stream within bounds: a small gzip that inflates to a line of 64 MiB (a gzip bomb),
more lines than MAX_RECORDS, more bytes than MAX_FILE_BYTES. Each is a PredictionError naming the file (and the line),
read in bounded memory where the whole file was read into memory (a 4 GiB bomb: a MemoryError or 8 GB); the
``summarize`` command turns it into exit 4 with that message (``--baseline`` reads through the same function)."""

import gzip
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from laya_robustness import predictions
from laya_robustness.predictions import MAX_LINE_BYTES, MAX_RECORDS, PredictionError, read_predictions

ROOT = Path(__file__).resolve().parents[2]
RECORD = {"row_id": "d/1", "group_id": "d/1", "cluster": "c", "dataset": "d", "family": "orig", "variant": "orig",
          "primitive": "noul", "label": 1, "logits": [0.0, 1.0], "probs": [0.3, 0.7], "argmax": 1}


def bomb(path: Path, inflated: int, byte: bytes = b" ") -> Path:
    """A gzip file of ``inflated`` bytes of ``byte`` (one line), written in pieces: a few KiB on disk."""
    chunk = byte * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(inflated >> 20):
            fh.write(chunk)
    return path


def test_a_gzip_bomb_of_one_long_line_is_refused_in_bounded_memory(tmp_path):
    path = bomb(tmp_path / "predictions.jsonl.gz", 64 << 20)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(PredictionError) as raised:
            read_predictions(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(raised.value) == (f"{path}:1: field '(line)': a line over {MAX_LINE_BYTES:,} bytes, the limit of one "
                                 "record")
    assert peak < 8 * MAX_LINE_BYTES, peak
    assert time.monotonic() - started < 2


def test_more_lines_than_the_bound_are_refused(tmp_path):
    path = tmp_path / "predictions.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * (MAX_RECORDS + 1)))
    with pytest.raises(PredictionError, match=rf"predictions\.jsonl\.gz: field '\(file\)': over {MAX_RECORDS:,} lines"):
        read_predictions(path)


def test_more_bytes_than_the_bound_are_refused(tmp_path, monkeypatch):
    """The bound of 2 GiB lowered to 1 MiB: records of real lines past it."""
    monkeypatch.setattr(predictions, "MAX_FILE_BYTES", 1 << 20)
    line = json.dumps({**RECORD, "meta": {"pad": "x" * 1000}}) + "\n"
    path = tmp_path / "predictions.jsonl.gz"
    path.write_bytes(gzip.compress(line.encode() * 2000))
    with pytest.raises(PredictionError, match=r"field '\(file\)': over 1,048,576 bytes inflated"):
        read_predictions(path)
    path.write_bytes(gzip.compress(line.encode() * 800))
    assert len(read_predictions(path)) == 800


def test_a_line_that_is_not_utf8_and_a_file_cut_short_are_named(tmp_path):
    path = tmp_path / "predictions.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(RECORD) + "\n").encode() + b'{"row_id": "\xff"}\n'))
    with pytest.raises(PredictionError, match=r"predictions\.jsonl\.gz:2: field '\(line\)': not UTF-8"):
        read_predictions(path)
    path.write_bytes(gzip.compress((json.dumps(RECORD) + "\n").encode() * 50)[:-12])
    with pytest.raises(PredictionError, match=r"field '\(file\)': not a readable gzip UTF-8 file"):
        read_predictions(path)


def test_summarize_on_a_gzip_bomb_exits_4_with_one_line(tmp_path):
    path = bomb(tmp_path / "predictions.jsonl.gz", 64 << 20)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "laya_robustness", "summarize", str(path)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stderr[-2000:]
    assert result.stderr.strip() == (f"error: {path}:1: field '(line)': a line over {MAX_LINE_BYTES:,} bytes, the "
                                     "limit of one record")

