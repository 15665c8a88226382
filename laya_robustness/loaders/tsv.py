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
naming the file, line and column; the file is read to its end and every row's problems kept together
(``loaders.problems``), each cell checked. A header holds at most ``MAX_COLUMNS`` columns and a cell other than
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

from laya_robustness.loaders.fixes import NOT_UTF8, TOO_LONG
from laya_robustness.loaders.image_refs import ImageRef, Where, check_payload_size, file_image, payload_image
from laya_robustness.loaders.problems import FAILED, Problems, RowErrors, attempt, each, row_problems
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.validate import SourceRow, bounded, duplicate
from laya_robustness.rows import LETTERS, OPEN_LABEL, Row, RowError

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
            return each(lambda b64, name: _b64_image(b64, where, name, settings), items, "image"), None
        if len(image) <= REFERENCE_MAX_CHARS:
            return (), image
        return (_b64_image(image, where, "image", settings),), None
    image_path = _value(cells, "image_path")
    if image_path is not None:
        paths = _literal_list(image_path, where, "image_path") if _is_list(image_path) else [image_path]
        one = lambda p, name: file_image(where, name, p, path.parent, data_root, settings)  # noqa: E731
        return each(one, paths, "image_path") if len(paths) > 1 else (one(paths[0], "image_path"),), None
    columns = [c for c in ("image", "image_path") if c in cells]
    raise where.error(columns[0], _missing(cells, columns[0]) + " (a row needs an image; "
                      "VLMEvalKit leaves rows without one out)")


def _options(cells, letters: list[str], where: Where) -> list[str]:
    """The option columns a row fills: A, B, ... without gaps, at least two."""
    present = [c for c in letters if _value(cells, c) is not None]
    for i, letter in enumerate(letters):
        later = [c for c in letters[i + 1:] if c in present]
        if letter not in present and later:
            raise where.error(letter, f"{_missing(cells, letter)}, but option {later[0]} is not: a row's options "
                                      f"are {', '.join(letters[:2])}, ... without gaps")
    if len(present) < 2:
        column = letters[len(present)] if len(present) < len(letters) else letters[-1]
        raise where.error(column, f"{_missing(cells, column)}: a choice row needs at least two options (A and B)")
    return present


def _wrong_letter(answer: str, present: list[str]) -> str:
    """What is wrong with an answer that is not one of the row's option letters ``present``."""
    shown = ", ".join(present)
    letters_named = re.sub(r"[\s,;/&]+", "", answer)
    if len(letters_named) > 1 and all(c in LETTERS for c in letters_named):
        return f"{answer!r} names several options; a row has exactly one gold letter (of {shown})"
    if answer.upper() in present:
        return f"{answer!r} is not an option letter (of {shown}); did you mean {answer.upper()!r}?"
    if answer in LETTERS:
        return f"{answer!r} names an option this row does not have (its options: {shown})"
    return f"{answer!r} is not one of the row's option letters {shown}"


def _choice(cells, letters: list[str], where: Where) -> tuple[list[str], int]:
    """(options, label) of a row with option columns; the answer is one letter of a non-empty option (its letter
    is checked against options that are there)."""
    found: list[RowError] = []
    present = attempt(found, _options, cells, letters, where)
    answer = _value(cells, "answer")
    if answer is None:
        found.append(where.error("answer", f"{_missing(cells, 'answer')}: a choice row needs its gold option letter"))
    elif present is not FAILED and answer not in present:
        found.append(where.error("answer", _wrong_letter(answer, present)))
    if found:
        raise RowErrors(found)
    return [_value(cells, c) for c in present], present.index(answer)


def _answers(cells, where: Where) -> list[str]:
    answer = _value(cells, "answer")
    if answer is None:
        raise where.error("answer", f"{_missing(cells, 'answer')}: an open row (no option columns) needs its "
                                    f"accepted answer")
    return _literal_list(answer, where, "answer") if _is_list(answer) else [answer]


def _header_problems(header: list[str], where: Where) -> list[RowError]:
    """Every problem of a header's column names: not UTF-8, too long, given twice, required and missing, a gap."""
    found: list[RowError] = []
    seen: set[str] = set()
    for i, name in enumerate(header):
        attempt(found, _utf8, name, where, f"<header column {i + 1}>")
        attempt(found, bounded, name, where, f"<header column {i + 1}>")
        if name in seen:
            found.append(where.error(name, "column given twice in the header"))
        seen.add(name)
    found += [where.error(name, "column missing from the header") for name in REQUIRED if name not in header]
    if "image" not in header and "image_path" not in header:
        found.append(where.error("image", "column missing from the header (and no image_path column)"))
    letters = sorted({c for c in header if len(c) == 1 and c in LETTERS})
    if letters and letters != list(LETTERS[: len(letters)]):
        gap = next(c for c in LETTERS if c not in letters)
        found.append(where.error(gap, f"column missing from the header, which has option columns "
                                      f"{', '.join(letters)}"))
    if letters == ["A"]:
        found.append(where.error("B", "column missing from the header: a choice TSV has option columns A, B, ..."))
    return found


def _header(reader, path: Path) -> list[str]:
    """The column names of the first line; RowErrors of every problem of a header the rows cannot be read with."""
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
                                      f"has a dozen or two)", TOO_LONG)
    found = _header_problems(header, where)
    if found:
        raise RowErrors(found)
    return header


def _utf8(text: str, where: Where, column: str) -> None:
    found = _NOT_UTF8.search(text)
    if found:
        raise where.error(column, f"not UTF-8: byte 0x{ord(found.group()) - 0xdc00:02x} at character "
                                  f"{found.start() + 1} of the cell", NOT_UTF8)


def _present(cells: dict[str, str], column: str, where: Where) -> str:
    """The cell's text; a RowError when pandas would read it as missing."""
    value = _value(cells, column)
    if value is None:
        raise where.error(column, _missing(cells, column))
    return value


def _gold(cells, letters: list[str], where: Where) -> tuple[list[str], int, list[str], str]:
    """(options, label, answers, primitive): a choice row with option columns, else an open row."""
    if letters:
        return *_choice(cells, letters, where), [], "choice"
    return [], OPEN_LABEL, _answers(cells, where), "open"


def _pending(cells: dict[str, str], letters: list[str], where: Where, path: Path, data_root: Path,
             settings: LoadSettings) -> _Pending:
    """One data line read into a row whose image may refer to another row's; the RowErrors of every problem of
    the line otherwise (a column whose cell is not UTF-8 or too long is not checked again)."""
    found: list[RowError] = []
    for column, text in cells.items():
        if column != "image":  # base64 images: their size is bounded by the image limits
            attempt(found, bounded, text, where, column)
        attempt(found, _utf8, text, where, column)
    bad = {p.field_name for p in found}
    index, question = (attempt(found, _present, cells, c, where) if c not in bad else FAILED
                       for c in ("index", "question"))
    gold = attempt(found, _gold, cells, letters, where) if not bad & {*letters, "answer"} else FAILED
    images = (attempt(found, _images, cells, where, path, data_root, settings)
              if not bad & {"image", "image_path"} else FAILED)
    if found:
        raise row_problems(found, "choice" if letters else "open")
    options, label, answers, primitive = gold
    row_id = f"{path.stem}/{index}"
    row = Row(row_id=row_id, dataset=path.stem, group_id=row_id, cluster=row_id, images=(), question=question,
              options=tuple(options), label=label, primitive=primitive, context=_value(cells, "hint"),
              category=_value(cells, "category"), answers=tuple(answers))
    return _Pending(where, index, row, *images)


def _lines(reader, header: list[str], path: Path, problems: Problems):
    """(where, cells) of every non-blank data line; a line that is not a TSV line of the header's width is a
    problem, and the next line is read."""
    previous = reader.line_num
    while True:
        where = Where(path, previous + 1)
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            problems.add(where.error("<tsv>", f"not a TSV line: {exc}"))
            if reader.line_num == previous:  # the reader cannot go on
                return
            previous = reader.line_num
            continue
        previous = reader.line_num
        if not any(c.strip() for c in raw):
            continue
        if len(raw) != len(header):
            problems.add(where.error("<tsv>", f"{len(raw)} cells, but the header has {len(header)} columns"))
            continue
        yield where, dict(zip(header, raw))


def _rows(path: Path, data_root: Path, settings: LoadSettings, problems: Problems) -> tuple[list[_Pending], set]:
    """The good rows of the file and the indexes of the bad ones (their problems go to ``problems``)."""
    csv.field_size_limit(sys.maxsize)  # base64 images are long cells; each image's size is checked below
    pending: list[_Pending] = []
    failed: set = set()
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        try:
            header = _header(reader, path)
        except RowError as exc:  # the rows cannot be read without their header
            problems.add(exc)
            return [], failed
        letters = sorted(c for c in header if len(c) == 1 and c in LETTERS)
        for where, cells in _lines(reader, header, path, problems):
            try:
                pending.append(_pending(cells, letters, where, path, data_root, settings))
            except RowError as exc:
                problems.add(exc)
                failed.add(_value(cells, "index"))
    return pending, failed


def _target(p: _Pending, by_index: dict, failed: set, path: Path) -> _Pending | None:
    """The row whose image ``p`` has (itself, or the end of its chain of references); None when the chain
    reaches a row that has problems of its own."""
    seen, target = [p], p
    while target.refers_to is not None:
        if target.refers_to in failed:
            return None
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
    return target


def _resolve(pending: list[_Pending], failed: set, path: Path, problems: Problems) -> list[_Pending]:
    """The rows, each that refers to another row's image given that row's images and image cluster; a reference
    that leads nowhere is a problem."""
    by_index = {p.index: p for p in pending}
    out = []
    for p in pending:
        try:
            target = _target(p, by_index, failed, path)
        except RowError as exc:
            problems.add(exc)
            continue
        if target is not None and target is not p:
            p.images, p.row = target.images, dataclasses.replace(p.row, cluster=target.row.cluster)
        if target is not None:
            out.append(p)
    return out


def read_tsv(path: Path, data_root: Path, settings: LoadSettings, problems: Problems) -> list[SourceRow]:
    """The good rows of one VLMEvalKit TSV (dataset: the file stem), in file order; every problem of the file goes to
    ``problems``."""
    pending, failed = _rows(path, data_root, settings, problems)
    seen: dict = {}
    unique = []
    for p in pending:
        clash = duplicate(p.row.row_id, p.where, seen)
        if clash is None:
            unique.append(p)
        else:
            problems.add(clash)
    return [SourceRow(p.row, p.images, p.where) for p in _resolve(unique, failed, path, problems)]
