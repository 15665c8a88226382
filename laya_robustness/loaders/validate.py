"""One record (a JSONL object or a table row, keyed by row field) validated into a row whose images wait.

Every check names the file, the line or row, and the field. Choice and noul rows need at least
two non-empty options and an int label indexing them; open rows have no options, a non-empty
list of accepted answers and label -1 (or none). No text field is longer than ``MAX_TEXT_CHARS``.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from laya_robustness.loaders.images import ImageRef, Where, file_image
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.rows import OPEN_LABEL, PRIMITIVES, RECORD_FIELDS, Row, user_meta_problem

NOUL_OPTIONS = ["no", "yes"]
#: The longest text field of a row (a question, an option, a context, an accepted answer, an id), far above any
#: real one (a long reading-comprehension passage is a few thousand characters): a longer one is a data error, so
#: no cell of hundreds of megabytes is kept, copied into every variant and written into the reports.
MAX_TEXT_CHARS = 100_000


@dataclass(frozen=True, eq=False)
class SourceRow:
    """A validated row whose images are checked but not decoded; :meth:`load` decodes them."""

    row: Row  # every field but the pixels (images=())
    images: tuple[ImageRef, ...]
    where: Where

    @property
    def row_id(self) -> str:
        return self.row.row_id

    @property
    def dataset(self) -> str:
        return self.row.dataset

    def load(self) -> Row:
        """The row with its images decoded (RGB)."""
        return dataclasses.replace(self.row, images=tuple(ref.decode() for ref in self.images))


def kind(value: Any) -> str:
    """How a value's type is named in errors: 'null', 'a bool', 'an int', 'a string', ..."""
    if value is None:
        return "null"
    names = {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list",
             dict: "an object", bytes: "bytes"}
    return names.get(type(value), f"a {type(value).__name__}")


def _missing(record: Mapping[str, Any], name: str) -> str:
    close = difflib.get_close_matches(name, [k for k in record if isinstance(k, str)], n=1)
    return "missing" + (f" (did you mean {close[0]!r}?)" if close else "")


def bounded(text: str, where: Where, field_name: str) -> str:
    """``text``, which must be at most MAX_TEXT_CHARS long (a RowError naming the field otherwise)."""
    if len(text) > MAX_TEXT_CHARS:
        raise where.error(field_name, f"{len(text):,} characters, over the limit of {MAX_TEXT_CHARS:,} for a text "
                                      f"field (far longer than any real question, option or context)")
    return text


def _text(record, name: str, where: Where, *, required: bool, ints_as_text: bool = False) -> str | None:
    """A non-empty string field (or None when absent / null and not required)."""
    value = record.get(name)
    if value is None:
        if required:
            raise where.error(name, _missing(record, name) if name not in record else "expected a string, got null")
        return None
    if ints_as_text and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise where.error(name, f"expected a string, got {kind(value)}")
    if not value.strip():
        raise where.error(name, "empty")
    return bounded(value, where, name)


def _optional_text(record, name: str, where: Where) -> str | None:
    value = record.get(name)
    if value is not None and not isinstance(value, str):
        raise where.error(name, f"expected a string or null, got {kind(value)}")
    return value if value is None else bounded(value, where, name)


def _string_list(record, name: str, where: Where) -> list[str] | None:
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"expected a list of strings, got {kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise where.error(name, f"item {i} is {kind(item)}, expected a non-empty string")
        if not item.strip():
            raise where.error(name, f"item {i} is an empty string")
        bounded(item, where, f"{name}[{i}]")
    return value


def _label(record, where: Where) -> int | None:
    value = record.get("label")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise where.error("label", f"expected an int (the gold option's index), got {kind(value)}")
    return value


def _open_gold(record, options, answers, label, where: Where) -> tuple[list[str], int, list[str]]:
    """An open row: no options, a non-empty list of answers, label -1 (or none)."""
    if options:
        raise where.error("options", "an open row has no options (its accepted answers go in 'answers')")
    if not answers:
        need = "an open row needs a non-empty list of accepted answers"
        found = "null" if "answers" in record else _missing(record, "answers")
        raise where.error("answers", f"{found} ({need})" if answers is None else need)
    if label not in (None, OPEN_LABEL):
        raise where.error("label", f"an open row has label {OPEN_LABEL} or none (it has no option index), got {label}")
    return [], OPEN_LABEL, answers


def _choice_gold(record, primitive: str, options, answers, label, where: Where) -> tuple[list[str], int, list[str]]:
    """A choice / noul row: at least two options, a label indexing them, no answers."""
    if options is None:
        hint = " (a row with accepted answers and no options needs \"primitive\": \"open\")" if answers else ""
        problem = "expected a list of strings, got null" if "options" in record else _missing(record, "options")
        raise where.error("options", problem + hint)
    if len(options) < 2:
        raise where.error("options", f"need at least two non-empty strings, got {len(options)}")
    if answers:
        raise where.error("answers", f"only open rows have answers; a {primitive} row's gold is its label")
    if label is None:
        null = "expected an int (the gold option's index), got null"
        raise where.error("label", null if "label" in record else _missing(record, "label"))
    if not 0 <= label < len(options):
        raise where.error("label", f"{label} is not an index into {len(options)} options")
    if primitive == "noul" and [o.lower() for o in options] != NOUL_OPTIONS:
        raise where.error("options", f"a noul row has the options {NOUL_OPTIONS}, got {options}")
    return options, label, []


def record_row(record: Mapping[str, Any], where: Where, images: Callable[[Any], tuple[ImageRef, ...]],
               *, ints_as_ids: bool = False) -> SourceRow:
    """Validate ``record`` (keys are row fields) into a SourceRow; ``images`` turns the images value into refs.

    ``ints_as_ids``: int ``row_id`` / ``group_id`` / ``cluster`` values are read as text (table columns).
    """
    dataset = _text(record, "dataset", where, required=True)
    row_id = _text(record, "row_id", where, required=True, ints_as_text=ints_as_ids)
    question = _text(record, "question", where, required=True)
    group_id = _text(record, "group_id", where, required=False, ints_as_text=ints_as_ids) or row_id
    cluster = _text(record, "cluster", where, required=False, ints_as_text=ints_as_ids) or row_id
    primitive = record.get("primitive", "choice")
    if primitive not in PRIMITIVES:
        raise where.error("primitive", f"{primitive!r} is not one of {', '.join(PRIMITIVES)}")
    gold = (_string_list(record, "options", where), _string_list(record, "answers", where), _label(record, where))
    options, label, answers = (_open_gold(record, *gold, where) if primitive == "open"
                               else _choice_gold(record, primitive, *gold, where))
    context = _optional_text(record, "context", where)
    category = _optional_text(record, "category", where)
    meta = {} if record.get("meta") is None else record["meta"]
    if not isinstance(meta, dict):
        raise where.error("meta", f"expected an object, got {kind(meta)}")
    for key, value in meta.items():
        problem = user_meta_problem(key, value)
        if problem is not None:
            raise where.error(f"meta.{problem[0]}", problem[1])
    row = Row(row_id=row_id, dataset=dataset, group_id=group_id, cluster=cluster, images=(), question=question,
              options=tuple(options), label=label, primitive=primitive, context=context or None,
              category=category, meta=meta, answers=tuple(answers))
    return SourceRow(row, images(record.get("images")), where)


def refuse_duplicates(ids: "list[tuple[str, Where]]", seen: "dict[str, Where] | None" = None) -> None:
    """Refuse a row id given twice, naming both places; ``seen`` carries the ids of files read before."""
    seen = {} if seen is None else seen
    for row_id, where in ids:
        first = seen.setdefault(row_id, where)
        if first is not where:
            raise where.error("row_id", f"{row_id!r} is also the row_id of {first} (row ids must be unique across "
                                        f"every file of --data)")


def manifest_images(where: Where, base_dir: Path, data_root: Path, settings: LoadSettings):
    """The images of a manifest record: a list of paths relative to ``base_dir``."""

    def refs(value: Any) -> tuple[ImageRef, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise where.error("images", f"expected a list of relative paths, got {kind(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise where.error(f"images[{i}]", f"expected a relative path, got {kind(item)}")
            out.append(file_image(where, f"images[{i}]", item, base_dir, data_root, settings))
        return tuple(out)

    return refs


#: Keys other datasets give a row's right answer under.
ANSWER_KEYS = ("answer", "answer_idx", "answer_index", "answer_id", "gold", "correct", "correct_answer", "target",
               "solution", "ground_truth")


def field_hint(key: str, record: Mapping[str, Any]) -> str:
    """What to write instead of an unknown ``key``, for this row's kind: a right answer goes under ``label`` in a
    choice row (it has ``options``) and under ``answers`` in an open one; else the closest field's name.

    >>> field_hint("answer", {"question": "q", "options": ["a", "b"]})
    "did you mean 'label' (a choice row's right answer: the index of the right option in 'options', from 0)? "
    >>> field_hint("answer", {"question": "q"})
    "did you mean 'answers' (an open row's right answers: a list of the accepted texts)? "
    >>> field_hint("qestion", {})
    "did you mean 'question'? "
    """
    if key.lower() in ANSWER_KEYS:
        if "options" in record and "label" not in record:
            return ("did you mean 'label' (a choice row's right answer: the index of the right option in 'options', "
                    "from 0)? ")
        if "options" not in record and "answers" not in record:
            return "did you mean 'answers' (an open row's right answers: a list of the accepted texts)? "
    close = difflib.get_close_matches(key, RECORD_FIELDS, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def unknown_fields(record: Mapping[str, Any], where: Where) -> None:
    """Refuse a manifest key that is not a row field (with a "did you mean" that fits the row's kind)."""
    for key in record:
        if key not in RECORD_FIELDS:
            raise where.error(key, f"unknown field; {field_hint(key, record)}(fields: {', '.join(RECORD_FIELDS)}; "
                                   f"put anything else under 'meta')")


def manifest_row(record: Mapping[str, Any], base_dir: Path, data_root: Path, path, line: int | None,
                 settings: LoadSettings) -> SourceRow:
    """One JSONL manifest record: known fields only, image paths relative to ``base_dir``."""
    where = Where(Path(path), line)
    unknown_fields(record, where)
    return record_row(record, where, manifest_images(where, base_dir, data_root, settings))
