"""Parquet files and ``datasets.save_to_disk`` directories: table rows read batch by batch into rows.

Columns named like the row fields are read as they are; ``LoadSettings.data_map`` maps other
names (``question=prompt,options=choices,label=answer_idx``). Images may be the ``datasets``
Image feature (``{"bytes", "path"}``), a list of them, raw bytes, or paths relative to the file.
A missing ``dataset`` is the source's default name (the file stem, or the directory name for
shards); a missing ``row_id`` is ``<dataset>/<position>``, the row's 0-based position in its
dataset (shards in order), as ``datasets`` indexes it. Only the mapped columns are read, and
image bytes stay encoded until a row is loaded. Every file is read to its end (a file whose columns do not map,
or that breaks while read, to there) and every row's problems kept together (``loaders.problems``).

Needs ``pyarrow`` (the ``datasets`` extra).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Iterator

from laya_robustness.loaders.image_refs import ImageRef, Where, file_image, payload_image
from laya_robustness.loaders.problems import Problems, RowErrors, each
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.validate import SourceRow, kind, record_row
from laya_robustness.rows import RECORD_FIELDS, RowError

EXTRA_HINT = "pip install 'laya-robustness[datasets]'"
BATCH_ROWS = 256
#: How close (difflib ratio) an unmapped column's name must be to a field's to be flagged (image/images).
CLOSE_NAME = 0.8


class MissingExtraError(RowError):
    """Reading a table needs the optional ``datasets`` extra (pyarrow), which is not installed."""

    def __init__(self, path: str | Path):
        super().__init__(path, None, "<file>", f"reading parquet files and datasets directories needs the "
                                               f"'datasets' extra: {EXTRA_HINT}")


def pyarrow_modules(path: Path):
    """(pyarrow, pyarrow.parquet, pyarrow.ipc), or MissingExtraError naming the extra."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise MissingExtraError(path) from None
    return pyarrow, pyarrow.parquet, pyarrow.ipc


def _columns(names: list[str], settings: LoadSettings, where: Where) -> dict[str, str]:
    """{row field: column} for one file; RowErrors of every field whose column is wrong or missing, each saying
    which ``--data-map`` entry would fix it."""
    listed = ", ".join(names)
    mapped = {c for c in settings.data_map.values() if c}
    out: dict[str, str] = {}
    found = []
    for name in RECORD_FIELDS:
        column = settings.data_map.get(name, name)
        if column in names:
            out[name] = column
        elif name in settings.data_map and column:
            found.append(where.error(name, f"column {column!r} (--data-map {name}={column}) is not in the file; "
                                           f"its columns: {listed}"))
        elif name not in settings.data_map:
            close = [c for c in difflib.get_close_matches(name, names, n=1, cutoff=CLOSE_NAME) if c not in mapped]
            if close:
                found.append(where.error(name, f"no column {name!r}, but there is {close[0]!r}: map it with "
                                               f"--data-map {name}={close[0]} (or {name}= to read none)"))
    failed = {p.field_name for p in found}
    if "question" not in out and "question" not in failed:
        found.append(where.error("question", f"no column for it (columns: {listed}); map one with "
                                             f"--data-map question=<column>"))
    if "options" not in out and "answers" not in out and not failed & {"options", "answers"}:
        found.append(where.error("options", f"no 'options' column (choice rows) and no 'answers' column (open "
                                            f"rows) (columns: {listed}); map one with --data-map options=<column> "
                                            f"or answers=<column>"))
    if found:
        raise RowErrors(found)
    return out


def _image_refs(where: Where, base_dir: Path, data_root: Path, settings: LoadSettings):
    """The images cell of a table row: an Image struct, raw bytes, a path, or a list of them."""

    def one(item: Any, field_name: str) -> ImageRef:
        if isinstance(item, dict):
            data, path = item.get("bytes"), item.get("path")
            if data is not None:
                if not isinstance(data, bytes):
                    raise where.error(field_name, f"expected the image's bytes, got {kind(data)}")
                return payload_image(where, field_name, data, settings)
            if isinstance(path, str):
                return file_image(where, field_name, path, base_dir, data_root, settings)
            raise where.error(field_name, "an image with neither bytes nor a path")
        if isinstance(item, bytes):
            return payload_image(where, field_name, item, settings)
        if isinstance(item, str):
            return file_image(where, field_name, item, base_dir, data_root, settings)
        raise where.error(field_name, f"expected an image ({{bytes, path}}, bytes or a path), got {kind(item)}")

    def refs(value: Any) -> tuple[ImageRef, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            return (one(value, "images"),)
        return each(one, value, "images")

    return refs


def _record(values: dict, fields: dict[str, str], where: Where) -> dict:
    """The row-field record of one table row: JSON meta parsed, a lone answer listed, the primitive inferred."""
    record = {name: values[column] for name, column in fields.items()}
    meta = record.get("meta")
    if isinstance(meta, str):
        try:
            record["meta"] = json.loads(meta)
        except (ValueError, RecursionError) as exc:
            raise where.error("meta", f"not a JSON object: {exc}") from None
    if isinstance(record.get("answers"), str):
        record["answers"] = [record["answers"]]
    if record.get("primitive") is None:
        record["primitive"] = "open" if not record.get("options") and record.get("answers") else "choice"
    return record


def _batches(path: Path):
    """(column names, an iterator of row-dict lists) of a parquet file or an Arrow stream file."""
    pa, pq, ipc = pyarrow_modules(path)
    if path.suffix == ".parquet":
        handle = pq.ParquetFile(path)
        names = handle.schema_arrow.names

        def batches(wanted):
            for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
                yield batch.to_pylist()
        return names, batches
    reader = ipc.open_stream(pa.memory_map(str(path), "r"))
    names = reader.schema.names

    def batches(wanted):
        for batch in reader:
            yield batch.select(wanted).to_pylist()
    return names, batches


def _file_rows(path: Path, fields: dict[str, str], batches, default_dataset: str, positions: dict[str, int],
               data_root: Path, settings: LoadSettings, problems: Problems) -> Iterator[SourceRow]:
    """The good rows of one table file, its ``fields`` read from their columns; each bad row's problems go to
    ``problems`` (``positions``: the rows of each dataset before, for the row ids it makes)."""
    index = 0
    for rows in batches(sorted(set(fields.values()))):
        for values in rows:
            where = Where(path, index, "row")
            index += 1
            try:
                record = _record(values, fields, where)
                record.setdefault("dataset", default_dataset)
                dataset = record["dataset"]
                if "row_id" not in fields and isinstance(dataset, str):
                    record["row_id"] = f"{dataset}/{positions.get(dataset, 0)}"
                    positions[dataset] = positions.get(dataset, 0) + 1
                row = record_row(record, where, _image_refs(where, path.parent, data_root, settings),
                                 ints_as_ids=True)
            except RowError as exc:
                problems.add(exc)
                continue
            yield row


def read_table_files(files: list[Path], default_dataset: str, data_root: Path, settings: LoadSettings,
                     problems: Problems) -> Iterator[SourceRow]:
    """The good rows of one table source (a parquet file, parquet shards, or the Arrow files of a saved dataset);
    every problem goes to ``problems``: a file whose columns do not map is skipped, one that breaks is read to
    there."""
    pa, _, _ = pyarrow_modules(files[0])
    positions: dict[str, int] = {}
    for path in files:
        try:
            names, batches = _batches(path)
            fields = _columns(names, settings, Where(path))
        except RowError as exc:  # the file's columns do not map
            problems.add(exc)
            continue
        except (pa.ArrowException, OSError) as exc:
            problems.add(Where(path).error("<file>", f"cannot read the table: {exc}"))
            continue
        try:
            yield from _file_rows(path, fields, batches, default_dataset, positions, data_root, settings, problems)
        except (pa.ArrowException, OSError) as exc:
            problems.add(Where(path).error("<file>", f"cannot read the table: {exc}"))
