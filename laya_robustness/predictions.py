"""Read and write prediction records as byte-stable gzip JSON lines, validating every record.

A file is read as a stream within bounds (``MAX_LINE_BYTES`` a line, ``MAX_RECORDS`` lines, ``MAX_FILE_BYTES`` in
all, inflated): a file that inflates past them (a gzip bomb) is a PredictionError naming it, not a whole file in
memory.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from laya_robustness.records import REQUIRED_FIELDS, STR_FIELDS, PredictionError, Record

__all__ = ["PredictionError", "REQUIRED_FIELDS", "STR_FIELDS", "check_record", "predictions_bytes",
           "read_predictions", "write_predictions"]

#: The longest line of a predictions file (a record is a few hundred bytes; a served answer is kept to a few
#: thousand characters).
MAX_LINE_BYTES = 1 << 20
#: The most lines of a predictions file, blank ones included (the default gate writes about 10,000 records).
MAX_RECORDS = 2_000_000
#: The most bytes of a predictions file, inflated (about 1 KiB a record at MAX_RECORDS).
MAX_FILE_BYTES = 2 << 30


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


def _lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(1-based number, bytes) of each line of a gzip file, read as a stream within the module's bounds."""
    total = 0
    try:
        with gzip.open(path, "rb") as fh:
            for n, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
                total += len(line)
                if len(line) > MAX_LINE_BYTES:
                    raise PredictionError(f"{path}:{n}", "(line)", f"a line over {MAX_LINE_BYTES:,} bytes, the "
                                                                   f"limit of one record")
                if n > MAX_RECORDS:
                    raise PredictionError(str(path), "(file)", f"over {MAX_RECORDS:,} lines, the limit of a "
                                                               f"predictions file")
                if total > MAX_FILE_BYTES:
                    raise PredictionError(str(path), "(file)", f"over {MAX_FILE_BYTES:,} bytes inflated, the limit "
                                                               f"of a predictions file")
                yield n, line
    except (gzip.BadGzipFile, zlib.error, EOFError) as exc:
        raise PredictionError(str(path), "(file)", f"not a readable gzip UTF-8 file: {exc}") from exc


def read_predictions(path: str | Path) -> list[Record]:
    """Every record of a gzip JSON-lines file, validated; blank lines are skipped.

    Raises PredictionError naming the file, the 1-based line and the field, or the file when it is not gzip or
    is past the bounds of the module doc.
    """
    records = []
    for n, raw in _lines(path):
        where = f"{path}:{n}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PredictionError(where, "(line)", f"not UTF-8: {exc}") from exc
        if not line.strip():
            continue
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
