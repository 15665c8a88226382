"""What to write instead, for a data problem: one line by the field, the kind of row (choice, noul, open) and the
kind of file (JSONL manifest, VLMEvalKit TSV, parquet or ``datasets`` table), printed under the problem.

>>> from laya_robustness.rows import RowError
>>> print(with_fix(RowError("rows.jsonl", 3, "label", "3 is not an index into 2 options"), "choice").fix)
a choice row's 'label': the index of the right option in 'options', from 0
>>> print(with_fix(RowError("rows.jsonl", 1, "dataset", "missing")).fix)
'dataset' is required in every row of a manifest: the name the reports group its rows under, e.g. "dataset": "rows"
"""

from __future__ import annotations

import re
from pathlib import Path

from laya_robustness.rows import RowError

#: The fixes of problems that are not about one field's format.
OUTSIDE_DATA = "move the image under the data directory, or pass --allow-outside-data yes if it is meant to be read"
LARGE_IMAGE = "raise --max-image-pixels if the image is meant to be that large, or make it smaller"
DAMAGED_IMAGE = ("the image was cut short or damaged (in a download, a copy or an export): write it again from its "
                 "source, whole, or leave the row out")
TOO_LONG = "fix what wrote the file: a cell ran into the next, or a whole file landed in one field"
NOT_UTF8 = "save the file as UTF-8"
META = ("'meta': an object of your own keys; those a family reads: rotation_variant true or false, rephrasings a "
        "list of strings, translations an object language code -> text")
#: The fix for a field whatever the row's kind, in a JSONL manifest or a table.
FIELD_FIXES = {
    "row_id": "'row_id': a non-empty text naming the row, unique across every file of --data",
    "question": "'question': the question's text, not empty",
    "group_id": "'group_id': a non-empty text (the source row a variant comes from), or leave it out: the row_id",
    "cluster": "'cluster': a non-empty text (the image sibling questions share), or leave it out: the row_id",
    "primitive": "'primitive': choice (options and a label), noul (options [\"no\", \"yes\"] and a label) or open "
                 "(answers, no options); left out it is choice",
    "context": "'context': a text (the hint shown before the question), or null",
    "category": "'category': a text, or null",
    "meta": META,
    "<json>": "write the line as one JSON object in UTF-8, each key once (fields: docs/data.md#required-fields)",
    "<file>": "point --data at a JSONL manifest, a VLMEvalKit TSV, a parquet file or a datasets save_to_disk "
              "directory (or a directory of them), readable as such",
}
#: The fix for a field by the row's kind (choice, noul, open).
KIND_FIXES = {
    "options": {"choice": "a choice row's 'options': a list of at least two non-empty texts, in label order",
                "noul": "a noul row's 'options': [\"no\", \"yes\"] (its label: 0 for no, 1 for yes)",
                "open": "an open row has no 'options': leave them out and list its accepted answers in 'answers'"},
    "label": {"choice": "a choice row's 'label': the index of the right option in 'options', from 0",
              "noul": "a noul row's 'label': 0 for no, 1 for yes",
              "open": "an open row's 'label' is -1 or left out: its right answers go in 'answers'"},
    "answers": {"choice": "leave 'answers' out: a choice row's right answer is its 'label', the index of the right "
                          "option from 0 (an open row has \"primitive\": \"open\", answers and no options)",
                "noul": "leave 'answers' out: a noul row's right answer is its 'label', 0 for no, 1 for yes",
                "open": "an open row's 'answers': a non-empty list of the accepted answer texts"},
}
#: The fix for a column of a VLMEvalKit TSV.
TSV_FIXES = {
    "index": "'index': a non-empty id for the row, unique in the file",
    "question": "'question': the question's text, not empty",
    "image": "'image': a base64 image, a list literal of them, or the index of the row whose image it shares (or "
             "fill 'image_path')",
    "image_path": "'image_path': an image path relative to the TSV, inside the data directory, or a list literal "
                  "of them",
    "hint": "'hint': a text, or empty",
    "category": "'category': a text, or empty",
    "<tsv>": "one row a line, its cells separated by tabs, as many as the header has columns",
    "<header>": "the first line names the columns: index, image (or image_path), question, hint, A, B, ..., answer, "
                "category, each once",
}
TSV_ANSWER = {"choice": "'answer': the letter of the right option's column (one of A, B, ...)",
              "open": "'answer': the accepted answer, or a list literal of them (['yes', 'Yes'])"}
TSV_OPTIONS = "option columns A, B, ... filled in order without gaps, at least A and B in a choice row"


def source_kind(path: str | Path) -> str:
    """``jsonl``, ``tsv`` or ``table`` (a parquet or Arrow file), by the file's suffix."""
    suffix = Path(path).suffix
    return {".jsonl": "jsonl", ".tsv": "tsv"}.get(suffix, "table")


def _base_field(field_name: str) -> str:
    """``images[0]`` -> ``images``, ``meta.translations.fr`` -> ``meta``, ``<header column 3>`` -> ``<header>``."""
    if field_name.startswith("<header"):
        return "<header>"
    return re.split(r"[\[.]", field_name, maxsplit=1)[0] or field_name


def _dataset_fix(problem: RowError, source: str) -> str:
    stem = Path(problem.path).stem
    if source == "jsonl":
        return (f"'dataset' is required in every row of a manifest: the name the reports group its rows under, "
                f"e.g. \"dataset\": \"{stem}\"")
    return (f"'dataset': the name the reports group the row under, a non-empty text; without a dataset column "
            f"each row's is the file's stem ('{stem}'; a directory of shards: its name)")


def _images_fix(source: str) -> str:
    if source == "jsonl":
        return "'images': a list of image paths relative to the manifest, inside the data directory (or leave it out)"
    return ("'images': a datasets Image ({bytes, path}), the image's bytes, a path relative to the file, or a list "
            "of them")


def fix_for(problem: RowError, row_kind: str | None = None) -> str | None:
    """The fix for ``problem`` in a row of kind ``row_kind`` (None: not known, read as choice), by its file's kind;
    None for a field with no fix to say."""
    source, field = source_kind(problem.path), _base_field(problem.field_name)
    kind = row_kind if row_kind in ("choice", "noul", "open") else "choice"
    if source == "tsv":
        if problem.line == 1 or field == "<header>":
            return TSV_FIXES["<header>"]
        if field == "answer":
            return TSV_ANSWER["open" if kind == "open" else "choice"]
        return TSV_OPTIONS if re.fullmatch("[A-Z]", field) else TSV_FIXES.get(field)
    if source == "table" and problem.line is None and field != "<file>":
        return f"name a column '{field}', or map one to it with --data-map {field}=<column>"
    if field == "dataset":
        return _dataset_fix(problem, source)
    if field == "images":
        return _images_fix(source)
    if field in KIND_FIXES:
        return KIND_FIXES[field][kind]
    return FIELD_FIXES.get(field)


def with_fix(problem: RowError, row_kind: str | None = None) -> RowError:
    """``problem``, given the fix for its field and ``row_kind`` unless it has one."""
    if problem.fix is None:
        problem.fix = fix_for(problem, row_kind)
    return problem
