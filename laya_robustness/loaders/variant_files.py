"""The user's variant files: JSONL files of question rephrasings and translations (``--rephrasings``,
``--translations``) and of caption paraphrases (``--paraphrases``), each line validated, a bad one a ``RowError``
naming the file, line and field. The families read what they hold from a row's meta (``rows.REPHRASINGS``, ...).

A rephrasings / translations line is ``{"row_id": ..., "rephrasings": ["...", ...]}`` or ``{"row_id": ...,
"translations": {"fr": "...", ...}}``, with an optional ``"dataset"`` (without it, every dataset's row of that id
gets them) and an optional ``"provenance"`` object (how the texts were made; ``python -m laya_robustness variants
rephrase|translate`` writes these files with a language model). A paraphrases line is ``{"row_id": ...,
"paraphrases": ["...", ...]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from laya_robustness.loaders.jsonl import json_objects
from laya_robustness.rows import LANGUAGE_CODE, PARAPHRASES, REPHRASINGS, TRANSLATIONS, RowError

#: An optional object of a user file's line saying how its texts were made (``python -m laya_robustness variants``
#: writes the generator's identity and the prompt's hash there); read, not used.
PROVENANCE = "provenance"


def _rephrasings(value: Any, path, line: int) -> list[str]:
    if not isinstance(value, list) or not value:
        raise RowError(path, line, REPHRASINGS, f"expected a non-empty list of strings, got {value!r}")
    for i, s in enumerate(value):
        if not isinstance(s, str) or not s.strip():
            raise RowError(path, line, f"{REPHRASINGS}[{i}]", f"expected a non-empty string, got {s!r}")
    return list(value)


def _translations(value: Any, path, line: int) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise RowError(path, line, TRANSLATIONS, f"expected a non-empty object language -> text, got {value!r}")
    for language, text in value.items():
        if not LANGUAGE_CODE.fullmatch(language):
            raise RowError(path, line, f"{TRANSLATIONS}.{language}",
                           "not a language code (lower-case ISO 639, optionally with a region: 'fr', 'pt-BR')")
        if not isinstance(text, str) or not text.strip():
            raise RowError(path, line, f"{TRANSLATIONS}.{language}", f"expected a non-empty string, got {text!r}")
    return dict(value)


def read_user_file(path: str | Path, key: str) -> dict[tuple[str | None, str], Any]:
    """(dataset or None, row_id) -> the line's ``key`` value (``rephrasings`` or ``translations``), from a JSONL file
    of rephrasings or translations."""
    check = {REPHRASINGS: _rephrasings, TRANSLATIONS: _translations}[key]
    path = Path(path)
    out: dict[tuple[str | None, str], Any] = {}
    first_line: dict[tuple[str | None, str], int] = {}
    for line_no, record in json_objects(path):
        unknown = sorted(set(record) - {"row_id", "dataset", key, PROVENANCE})
        if unknown:
            raise RowError(path, line_no, unknown[0], f"unknown field (expected row_id, dataset, {key}, {PROVENANCE})")
        if not isinstance(record.get(PROVENANCE, {}), dict):
            raise RowError(path, line_no, PROVENANCE, f"expected an object, got {record[PROVENANCE]!r}")
        row_id, dataset = record.get("row_id"), record.get("dataset")
        if not isinstance(row_id, str) or not row_id:
            raise RowError(path, line_no, "row_id", f"expected a non-empty string, got {row_id!r}")
        if dataset is not None and (not isinstance(dataset, str) or not dataset):
            raise RowError(path, line_no, "dataset", f"expected a non-empty string, got {dataset!r}")
        if key not in record:
            raise RowError(path, line_no, key, "missing")
        where = (dataset, row_id)
        if where in first_line:
            raise RowError(path, line_no, "row_id", f"{row_id!r} was already given on line {first_line[where]}")
        first_line[where] = line_no
        out[where] = check(record[key], path, line_no)
    return out


def load_paraphrases(path: str | Path) -> dict[str, tuple[str, ...]]:
    """User paraphrases from a JSONL file: ``{"row_id": "...", "paraphrases": ["...", ...]}`` per line.

    Raises ``RowError`` naming the file, line and field (a row id given twice is an error).
    """
    path = Path(path)
    out: dict[str, tuple[str, ...]] = {}
    for line, record in json_objects(path):
        row_id = record.get("row_id")
        if not isinstance(row_id, str) or not row_id:
            raise RowError(path, line, "row_id", f"expected a non-empty string, got {row_id!r}")
        if row_id in out:
            raise RowError(path, line, "row_id", f"{row_id!r} appears twice")
        values = record.get(PARAPHRASES)
        if not isinstance(values, list) or not values:
            raise RowError(path, line, PARAPHRASES, "expected a non-empty list of strings")
        for k, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise RowError(path, line, f"{PARAPHRASES}[{k}]", f"expected a non-empty string, got {value!r}")
        out[row_id] = tuple(v.strip() for v in values)
    return out
