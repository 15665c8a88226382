"""Rows of any ``--data`` source written as parquet, one file per dataset, images as the ``datasets`` Image feature.

The encoded image bytes are copied as they are (never re-encoded), so the parquet form decodes
to the same pixels; ``meta`` is a JSON object string. The files carry the ``datasets`` feature
metadata, so ``datasets.load_dataset("parquet", data_files=...)`` sees the images as images.
Needs the ``datasets`` extra.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from laya_robustness.loaders import scan_rows
from laya_robustness.loaders.arrow import EXTRA_HINT
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.validate import SourceRow

SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _features():
    try:
        from datasets import Features, Image, List, Value
    except ImportError:
        raise ImportError(f"exporting parquet needs the 'datasets' extra: {EXTRA_HINT}") from None
    text = Value("string")
    return Features({
        "row_id": text, "dataset": text, "group_id": text, "cluster": text, "question": text,
        "options": List(text), "label": Value("int64"), "primitive": text, "answers": List(text),
        "context": text, "category": text, "meta": text, "images": List(Image()),
    })


def _record(source: SourceRow) -> dict:
    row = source.row
    return {
        "row_id": row.row_id, "dataset": row.dataset, "group_id": row.group_id, "cluster": row.cluster,
        "question": row.question, "options": list(row.options), "label": row.label, "primitive": row.primitive,
        "answers": list(row.answers), "context": row.context, "category": row.category,
        "meta": json.dumps(dict(row.meta), sort_keys=True),
        "images": [{"bytes": ref.read(), "path": ref.file.name if ref.file is not None else None}
                   for ref in source.images],
    }


def export_parquet(data: str | Path, out_dir: str | Path, settings: LoadSettings | None = None,
                   write: Callable[[Path, Any], None] | None = None) -> list[Path]:
    """Write every dataset under ``data`` as ``out_dir/<dataset>.parquet``; returns the paths written.

    Rows keep their order; loading ``out_dir`` gives the same rows (ids, fields, pixels) as ``data``. ``write(path,
    data)`` writes each file's bytes (the command line's ``run.files.atomic_write``, which refuses a target that is not
    a regular file); without it pyarrow writes the file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = _features()
    out_dir = Path(out_dir)
    by_dataset = scan_rows(data, settings)
    for name in by_dataset:
        if not SAFE_NAME.fullmatch(name):
            raise ValueError(f"dataset {name!r} cannot name a file; rename it (letters, digits, _ . -) to export it")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in sorted(by_dataset.items()):
        table = pa.Table.from_pylist([_record(r) for r in rows], schema=features.arrow_schema)
        path = out_dir / f"{name}.parquet"
        if write is None:
            pq.write_table(table, path)
        else:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            write(path, memoryview(sink.getvalue()))
        written.append(path)
    return written
