"""Read and write prediction records as byte-stable gzip JSON lines, validating every record."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping

from laya_robustness.records import REQUIRED_FIELDS, STR_FIELDS, PredictionError, Record

__all__ = ["PredictionError", "REQUIRED_FIELDS", "STR_FIELDS", "check_record", "predictions_bytes",
           "read_predictions", "write_predictions"]


def check_record(record: Any, where: str) -> Record:
    """Validate one record (fields and types, label in [-1, k), argmax in [0, k)); return it as a Record."""
    return Record.parse(record, where)


def predictions_bytes(records: Iterable[Mapping[str, Any]]) -> bytes:
    """One JSON line per record (keys sorted), gzipped with no name and mtime 0: the same records in the
    same order always give the same bytes."""
    lines = []
    for i, record in enumerate(records):
        Record.parse(record, f"record {i}")
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, mtime=0, fileobj=buffer) as gz:
        gz.write("".join(lines).encode("utf-8"))
    return buffer.getvalue()


def write_predictions(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Write :func:`predictions_bytes` of the records to ``path``."""
    Path(path).write_bytes(predictions_bytes(records))


def read_predictions(path: str | Path) -> list[Record]:
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
        records.append(Record.parse(record, where))
    return records


def sibling_meta(predictions_path: Path) -> dict:
    """The "meta" of the summary.json beside the predictions file, or {}."""
    sibling = predictions_path.parent / "summary.json"
    if not sibling.is_file():
        return {}
    try:
        data = json.loads(sibling.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    meta = data.get("meta") if isinstance(data, dict) else None
    return meta if isinstance(meta, dict) else {}
