"""VLMEvalKit TSV files: ``index``, ``image`` (base64) or ``image_path``, ``question``, ``hint``, ``A``..., ``answer``.

The conventions follow VLMEvalKit's ``ImageBaseDataset``, which reads the file with pandas:

- a cell pandas reads as missing (empty, ``nan``, ``NaN``, ``None``, ``NA``, ``null``, ...) is missing;
- ``image`` holds a base64 image, a list literal of them (``['iVBOR...', '...']``), or, when it is
  at most 64 characters, the ``index`` of another row whose image it shares (that row's image
  cluster); ``image_path`` (used when ``image`` is missing) holds a path or a list literal of
  paths relative to the TSV;
- with option columns ``A``, ``B``, ... the row is a ``choice`` row and ``answer`` is one option
  letter; without them the row is ``open`` and ``answer`` is its accepted answer, or a list
  literal of accepted answers.

Unlike a plain pandas read, nothing is guessed: an empty or multi-letter answer, an option gap,
a missing question, a dangling or circular image reference and a non-UTF-8 byte are errors
naming the file, line and column. A header holds at most ``MAX_COLUMNS`` columns and a cell other than
``image`` at most ``validate.MAX_TEXT_CHARS`` characters.
"""

from __future__ import annotations

import ast
import base64
import binascii
import csv
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from laya_robustness.loaders.images import ImageRef, Where, check_payload_size, file_image, payload_image
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.validate import SourceRow, bounded, refuse_duplicates
from laya_robustness.rows import LETTERS, OPEN_LABEL, Row

#: The strings pandas' ``read_csv`` reads as missing (its default ``na_values``).
NA_TEXT = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
#: An ``image`` cell this short is another row's index (VLMEvalKit's shared-image convention).
REFERENCE_MAX_CHARS = 64
REQUIRED = ("index", "question", "answer")
#: The most columns of a header (VLMEvalKit's have a dozen or two: index, image, question, hint, A to Z, answer,
#: category, ...).
MAX_COLUMNS = 1000
#: A character that stands for a byte that was not UTF-8 (read with surrogateescape).
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


@dataclass
class _Pending:
    """A row read from the file whose image may still be a reference to another row's."""

    where: Where
    index: str
    row: Row
    images: tuple[ImageRef, ...] = ()
    refers_to: str | None = None


def _value(cells: dict[str, str], column: str) -> str | None:
    """The stripped cell, or None when pandas would read it as missing (or the column is absent)."""
    text = cells.get(column)
    if text is None:
        return None
    text = text.strip()
    return None if text in NA_TEXT else text


def _missing(cells: dict[str, str], column: str) -> str:
    raw = (cells.get(column) or "").strip()
    return f"{raw!r} reads as a missing value (as pandas reads it)" if raw else "empty"


def _literal_list(text: str, where: Where, column: str) -> list[str]:
    """A cell holding a Python / JSON list literal of non-empty strings."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        raise where.error(column, f"starts with '[' but is not a list literal: {text[:60]!r}") from None
    if not isinstance(value, list) or not value:
        raise where.error(column, f"expected a non-empty list of strings, got {text[:60]!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise where.error(column, f"item {i} of the list is not a non-empty string")
    return [item.strip() for item in value]


def _is_list(text: str) -> bool:
    return text.startswith("[") and text.endswith("]")


def _b64_image(text: str, where: Where, column: str, settings: LoadSettings) -> ImageRef:
    compact = "".join(text.split())
    check_payload_size(where, column, len(compact) * 3 // 4 - compact[-2:].count("="), settings)
    try:
        payload = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise where.error(column, f"not a base64-encoded image: {exc}") from None
    return payload_image(where, column, payload, settings)


def _images(cells, where: Where, path: Path, data_root: Path, settings: LoadSettings):
    """(image refs, index referred to): from ``image``, else ``image_path``."""
    image = _value(cells, "image")
    if image is not None:
        if _is_list(image):
            items = _literal_list(image, where, "image")
            return tuple(_b64_image(b64, where, f"image[{i}]", settings) for i, b64 in enumerate(items)), None
        if len(image) <= REFERENCE_MAX_CHARS:
            return (), image
        return (_b64_image(image, where, "image", settings),), None
    image_path = _value(cells, "image_path")
    if image_path is not None:
        paths = _literal_list(image_path, where, "image_path") if _is_list(image_path) else [image_path]
        return tuple(file_image(where, f"image_path[{i}]" if len(paths) > 1 else "image_path", p, path.parent,
                                data_root, settings) for i, p in enumerate(paths)), None
    columns = [c for c in ("image", "image_path") if c in cells]
    raise where.error(columns[0], _missing(cells, columns[0]) + " (a row needs an image; "
                      f"VLMEvalKit leaves rows without one out)")


def _choice(cells, letters: list[str], where: Where) -> tuple[list[str], int]:
    """(options, label) of a row with option columns; the answer is one letter of a non-empty option."""
    present = [c for c in letters if _value(cells, c) is not None]
    for i, letter in enumerate(letters):
        later = [c for c in letters[i + 1:] if c in present]
        if letter not in present and later:
            raise where.error(letter, f"{_missing(cells, letter)}, but option {later[0]} is not: a row's options "
                                      f"are {', '.join(letters[:2])}, ... without gaps")
    if len(present) < 2:
        column = letters[len(present)] if len(present) < len(letters) else letters[-1]
        raise where.error(column, f"{_missing(cells, column)}: a choice row needs at least two options (A and B)")
    answer = _value(cells, "answer")
    if answer is None:
        raise where.error("answer", f"{_missing(cells, 'answer')}: a choice row needs its gold option letter")
    if answer not in present:
        shown = ", ".join(present)
        letters_named = re.sub(r"[\s,;/&]+", "", answer)
        if len(letters_named) > 1 and all(c in LETTERS for c in letters_named):
            problem = f"{answer!r} names several options; a row has exactly one gold letter (of {shown})"
        elif answer.upper() in present:
            problem = f"{answer!r} is not an option letter (of {shown}); did you mean {answer.upper()!r}?"
        elif answer in LETTERS:
            problem = f"{answer!r} names an option this row does not have (its options: {shown})"
        else:
            problem = f"{answer!r} is not one of the row's option letters {shown}"
        raise where.error("answer", problem)
    return [_value(cells, c) for c in present], present.index(answer)


def _answers(cells, where: Where) -> list[str]:
    answer = _value(cells, "answer")
    if answer is None:
        raise where.error("answer", f"{_missing(cells, 'answer')}: an open row (no option columns) needs its "
                                    f"accepted answer")
    return _literal_list(answer, where, "answer") if _is_list(answer) else [answer]


def _header(reader, path: Path) -> list[str]:
    try:
        header = next(reader)
    except StopIteration:
        raise Where(path, 1).error("<header>", "empty file: expected a header line") from None
    except csv.Error as exc:
        raise Where(path, 1).error("<header>", f"not a TSV header: {exc}") from None
    header = [h.strip() for h in header]
    where = Where(path, 1)
    if len(header) > MAX_COLUMNS:
        raise where.error("<header>", f"{len(header):,} columns, over the limit of {MAX_COLUMNS:,} (a VLMEvalKit TSV "
                                      f"has a dozen or two)")
    seen: set[str] = set()
    for i, name in enumerate(header):
        _utf8(name, where, f"<header column {i + 1}>")
        bounded(name, where, f"<header column {i + 1}>")
        if name in seen:
            raise where.error(name, "column given twice in the header")
        seen.add(name)
    for name in REQUIRED:
        if name not in header:
            raise where.error(name, "column missing from the header")
    if "image" not in header and "image_path" not in header:
        raise where.error("image", "column missing from the header (and no image_path column)")
    letters = sorted(c for c in header if len(c) == 1 and c in LETTERS)
    if letters and letters != list(LETTERS[: len(letters)]):
        gap = next(c for c in LETTERS if c not in letters)
        raise where.error(gap, f"column missing from the header, which has option columns {', '.join(letters)}")
    if letters == ["A"]:
        raise where.error("B", "column missing from the header: a choice TSV has option columns A, B, ...")
    return header


def _utf8(text: str, where: Where, column: str) -> None:
    found = _NOT_UTF8.search(text)
    if found:
        raise where.error(column, f"not UTF-8: byte 0x{ord(found.group()) - 0xdc00:02x} at character "
                                  f"{found.start() + 1} of the cell")


def _rows(path: Path, data_root: Path, settings: LoadSettings) -> list[_Pending]:
    dataset = path.stem
    csv.field_size_limit(sys.maxsize)  # base64 images are long cells; each image's size is checked below
    pending: list[_Pending] = []
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = _header(reader, path)
        letters = sorted(c for c in header if len(c) == 1 and c in LETTERS)
        previous = reader.line_num
        while True:
            where = Where(path, previous + 1)
            try:
                raw = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                raise where.error("<tsv>", f"not a TSV line: {exc}") from None
            previous = reader.line_num
            if not any(c.strip() for c in raw):
                continue
            if len(raw) != len(header):
                raise where.error("<tsv>", f"{len(raw)} cells, but the header has {len(header)} columns")
            cells = dict(zip(header, raw))
            for column, text in cells.items():
                if column != "image":  # base64 images: their size is bounded by the image limits
                    bounded(text, where, column)
                _utf8(text, where, column)
            index = _value(cells, "index")
            if index is None:
                raise where.error("index", _missing(cells, "index"))
            question = _value(cells, "question")
            if question is None:
                raise where.error("question", _missing(cells, "question"))
            if letters:
                options, label, answers, primitive = *_choice(cells, letters, where), [], "choice"
            else:
                options, label, answers, primitive = [], OPEN_LABEL, _answers(cells, where), "open"
            images, refers_to = _images(cells, where, path, data_root, settings)
            row_id = f"{dataset}/{index}"
            row = Row(row_id=row_id, dataset=dataset, group_id=row_id, cluster=row_id, images=(), question=question,
                      options=tuple(options), label=label, primitive=primitive, context=_value(cells, "hint"),
                      category=_value(cells, "category"), answers=tuple(answers))
            pending.append(_Pending(where, index, row, images, refers_to))
    return pending


def _resolve(pending: list[_Pending], path: Path) -> None:
    """Give each row that refers to another row's image that row's images and image cluster."""
    by_index = {p.index: p for p in pending}
    for p in pending:
        seen = [p]
        target = p
        while target.refers_to is not None:
            nxt = by_index.get(target.refers_to)
            if nxt is None:
                raise p.where.error("image", f"refers to the image of index {target.refers_to!r}, which no row of "
                                             f"{path.name} has (a cell of at most {REFERENCE_MAX_CHARS} characters "
                                             f"is another row's index)")
            if nxt in seen:
                chain = " -> ".join(f"index {q.index!r} ({q.where})" for q in (*seen, nxt))
                raise p.where.error("image", f"circular image reference: {chain}")
            seen.append(nxt)
            target = nxt
        if target is not p:
            p.images, p.row = target.images, dataclasses.replace(p.row, cluster=target.row.cluster)


def read_tsv(path: Path, data_root: Path, settings: LoadSettings) -> list[SourceRow]:
    """The rows of one VLMEvalKit TSV (dataset: the file stem), in file order."""
    pending = _rows(path, data_root, settings)
    refuse_duplicates([(p.row.row_id, p.where) for p in pending])
    _resolve(pending, path)
    return [SourceRow(p.row, p.images, p.where) for p in pending]
