"""Read and write prediction records as byte-stable gzip JSON lines, validating every record."""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping

#: Every record needs these fields (more are kept as they are).
STR_FIELDS = ("row_id", "group_id", "cluster", "dataset", "family", "variant", "primitive")
REQUIRED_FIELDS = STR_FIELDS + ("label", "logits", "probs", "argmax")


class PredictionError(ValueError):
    """A prediction record that cannot be used; the message names where it is and which field."""

    def __init__(self, where: str, field_name: str, problem: str):
        self.where, self.field_name = where, field_name
        super().__init__(f"{where}: field '{field_name}': {problem}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _numbers(record: Mapping[str, Any], key: str, where: str) -> list:
    values = record[key]
    if not isinstance(values, list) or not values:
        raise PredictionError(where, key, f"expected a non-empty list of numbers, got {values!r}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise PredictionError(where, key, f"expected finite numbers, got {values!r}")
    return values


def check_record(record: Any, where: str) -> Mapping[str, Any]:
    """Validate one record (fields and types, label in [-1, k), argmax in [0, k)); return it."""
    if not isinstance(record, Mapping):
        raise PredictionError(where, "(record)", f"expected a JSON object, got {type(record).__name__}")
    for key in REQUIRED_FIELDS:
        if key not in record:
            raise PredictionError(where, key, "missing")
    for key in STR_FIELDS:
        if not isinstance(record[key], str) or not record[key]:
            raise PredictionError(where, key, f"expected a non-empty string, got {record[key]!r}")
    k = len(_numbers(record, "logits", where))
    if len(_numbers(record, "probs", where)) != k:
        raise PredictionError(where, "probs", f"has {len(record['probs'])} entries for {k} logits")
    if not _is_int(record["label"]) or not -1 <= record["label"] < k:
        raise PredictionError(where, "label", f"expected an int in [-1, {k}), got {record['label']!r}")
    if not _is_int(record["argmax"]) or not 0 <= record["argmax"] < k:
        raise PredictionError(where, "argmax", f"expected an int in [0, {k}), got {record['argmax']!r}")
    return record


def write_predictions(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Write one JSON line per record (keys sorted) into a gzip file with no name and mtime 0.

    The same records in the same order always give the same bytes.
    """
    lines = []
    for i, record in enumerate(records):
        check_record(record, f"record {i}")
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, mtime=0, fileobj=buffer) as gz:
        gz.write("".join(lines).encode("utf-8"))
    Path(path).write_bytes(buffer.getvalue())


def read_predictions(path: str | Path) -> list[dict]:
    """Every record of a gzip JSON-lines file, validated; blank lines are skipped.

    Raises PredictionError naming the file, the 1-based line and the field.
    """
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except (gzip.BadGzipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        raise PredictionError(str(path), "(file)", f"not a readable gzip UTF-8 file: {exc}") from exc
    records = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PredictionError(where, "(line)", f"not valid JSON: {exc}") from exc
        records.append(dict(check_record(record, where)))
    return records
