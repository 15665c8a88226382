"""Rows from where users keep them: ``--data`` as a file or directory, read into rows by dataset.

``--data`` may be a JSONL manifest, a VLMEvalKit TSV, a parquet file, a ``datasets.save_to_disk``
directory, or a directory holding any of them: each ``.jsonl`` / ``.tsv`` is one dataset, the
``.parquet`` files directly in it are the shards of one dataset named after the directory, and
each subdirectory that is a saved dataset or holds parquet shards is a dataset named after it
(a ``dataset`` column, where there is one, names the dataset of each row instead).

:func:`scan_rows` validates every row and checks every image from its header and whole (``images.cut_short``),
decoding no PNG or JPEG pixels; :func:`load_rows` also decodes them. Row ids must be unique across all files.
Every file is read to its end and the problems of all of them raised together, as one ``RowErrors``
(``loaders.problems``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from laya_robustness.loaders.arrow import MissingExtraError, read_table_files
from laya_robustness.loaders.jsonl import read_jsonl
from laya_robustness.loaders.problems import Problems, RowErrors
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.tsv import read_tsv
from laya_robustness.loaders.validate import SourceRow, duplicate
from laya_robustness.rows import Row, RowError

__all__ = ["DataSource", "LoadSettings", "MissingExtraError", "RowErrors", "SourceRow", "find_sources", "load_jsonl",
           "load_rows", "load_tsv", "scan_rows"]

FILE_KINDS = {".jsonl": "jsonl", ".tsv": "tsv", ".parquet": "parquet"}
STATE_FILE = "state.json"  # written by datasets' Dataset.save_to_disk
DATASET_DICT_FILE = "dataset_dict.json"  # written by DatasetDict.save_to_disk
ACCEPTED = "a JSONL manifest, a VLMEvalKit TSV, a parquet file, a datasets.save_to_disk directory, or a " \
           "directory of them"


@dataclass(frozen=True)
class DataSource:
    """One thing to read: its kind (jsonl, tsv, parquet, arrow), its files, and its default dataset name."""

    kind: str
    files: tuple[Path, ...]
    dataset: str


def _saved_dataset(directory: Path) -> DataSource | None:
    """The Arrow files of a ``save_to_disk`` directory (in its state.json order), or None."""
    dict_file = directory / DATASET_DICT_FILE
    if dict_file.is_file():
        splits = sorted(p.name for p in directory.iterdir() if (p / STATE_FILE).is_file())
        example = directory / splits[0] if splits else directory / "<split>"
        raise RowError(dict_file, None, "<file>", f"a DatasetDict (splits: {', '.join(splits) or 'none'}); "
                                                  f"point --data at one split, e.g. {example}")
    state_file = directory / STATE_FILE
    if not state_file.is_file():
        return None
    try:
        state = json.loads(state_file.read_bytes())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise RowError(state_file, None, "_data_files", f"not a datasets state file: {exc!r}") from None
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or not (directory / name).is_file():
            raise RowError(state_file, None, "_data_files", f"{name!r} is not a data file of {directory}")
    if not names:
        raise RowError(state_file, None, "_data_files", "lists no data files")
    return DataSource("arrow", tuple(directory / n for n in names), directory.resolve().name)


def find_sources(source: Path) -> list[DataSource]:
    """What ``--data`` points at, as sources in name order (see the module docstring)."""
    if source.is_file():
        kind = FILE_KINDS.get(source.suffix)
        if kind is None:
            raise RowError(source, None, "<file>", f"unsupported file type {source.suffix!r}: --data takes {ACCEPTED}")
        return [DataSource(kind, (source,), source.stem)]
    if not source.is_dir():
        raise FileNotFoundError(f"no rows at {source}")
    saved = _saved_dataset(source)
    if saved is not None:
        return [saved]
    out: list[DataSource] = []
    entries = sorted(p for p in source.iterdir() if not p.name.startswith("."))
    shards = tuple(p for p in entries if p.is_file() and p.suffix == ".parquet")
    for entry in entries:
        if entry.is_file() and entry.suffix in (".jsonl", ".tsv"):
            out.append(DataSource(FILE_KINDS[entry.suffix], (entry,), entry.stem))
        elif shards and entry == shards[0]:
            out.append(DataSource("parquet", shards, source.resolve().name))
        elif entry.is_dir():
            saved = _saved_dataset(entry)
            sub_shards = tuple(sorted(p for p in entry.glob("*.parquet") if not p.name.startswith(".")))
            if saved is not None:
                out.append(saved)
            elif sub_shards:
                out.append(DataSource("parquet", sub_shards, entry.name))
    return out


def _read(source: DataSource, data_root: Path, settings: LoadSettings, problems: Problems) -> Iterable[SourceRow]:
    if source.kind == "jsonl":
        return read_jsonl(source.files[0], data_root, settings, problems)
    if source.kind == "tsv":
        return read_tsv(source.files[0], data_root, settings, problems)
    return read_table_files(list(source.files), source.dataset, data_root, settings, problems)


def _good_rows(sources: list[DataSource], data_root: Path, settings: LoadSettings,
               problems: Problems) -> list[SourceRow]:
    """Every row of ``sources`` that has no problem, in file order; a row id read before is a problem."""
    seen: dict = {}
    rows = []
    for data_source in sources:
        for row in _read(data_source, data_root, settings, problems):
            clash = duplicate(row.row_id, row.where, seen)
            if clash is None:
                rows.append(row)
            else:
                problems.add(clash)
    return rows


def scan_rows(source: str | Path, settings: LoadSettings | None = None) -> dict[str, list[SourceRow]]:
    """Every row under ``source`` by dataset, validated, its images checked from their headers but not decoded.

    Every file is read to its end: bad data raises one RowErrors naming each problem's file, line or row, field and
    fix; FileNotFoundError when there is none.
    """
    settings = settings or LoadSettings()
    source = Path(source)
    data_root = source if source.is_dir() else source.parent
    problems = Problems()
    try:
        sources = find_sources(source)
    except RowError as exc:  # what --data points at cannot be read: nothing more to read
        problems.add(exc)
        raise problems.error() from None
    by_dataset: dict[str, list[SourceRow]] = {}
    for row in _good_rows(sources, data_root, settings, problems):
        by_dataset.setdefault(row.dataset, []).append(row)
    problems.raise_any()
    if not by_dataset:
        raise FileNotFoundError(f"no rows under {source} (--data takes {ACCEPTED})")
    return by_dataset


def _decoded(rows: list[SourceRow], problems: Problems) -> list[Row]:
    """The rows with their images decoded; an image that does not decode is a problem (its row is left out)."""
    out = []
    for row in rows:
        try:
            out.append(row.load())
        except RowError as exc:
            problems.add(exc)
    return out


def load_rows(source: str | Path, settings: LoadSettings | None = None) -> dict[str, list[Row]]:
    """Every row under ``source`` by dataset, images decoded (RGB); RowErrors as ``scan_rows``."""
    problems = Problems()
    rows = {name: _decoded(rows, problems) for name, rows in scan_rows(source, settings).items()}
    problems.raise_any()
    return rows


def _load_file(path: Path, kind: str, settings: LoadSettings | None) -> list[Row]:
    problems = Problems()
    source = DataSource(kind, (path,), path.stem)
    rows = _good_rows([source], path.parent, settings or LoadSettings(), problems)
    problems.raise_any()
    decoded = _decoded(rows, problems)
    problems.raise_any()
    return decoded


def load_jsonl(path: str | Path, settings: LoadSettings | None = None) -> list[Row]:
    """The rows of one JSONL manifest in file order, images decoded; RowErrors naming every problem of the file."""
    return _load_file(Path(path), "jsonl", settings)


def load_tsv(path: str | Path, settings: LoadSettings | None = None) -> list[Row]:
    """The rows of one VLMEvalKit TSV in file order, images decoded; RowErrors naming every problem of the file."""
    return _load_file(Path(path), "tsv", settings)
