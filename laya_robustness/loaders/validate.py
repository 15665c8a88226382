"""One record (a JSONL object or a table row, keyed by row field) validated into a row whose images wait.

Every check names the file, the line or row, and the field, and every field is checked (a check that depends on
one that failed is skipped): a bad row raises the ``RowErrors`` of all its problems. Choice and noul rows need at
least two non-empty options and an int label indexing them; open rows have no options, a non-empty list of
accepted answers and label -1 (or none). No text field is longer than ``MAX_TEXT_CHARS``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from laya_robustness.loaders.fixes import TOO_LONG
from laya_robustness.loaders.image_refs import ImageRef, Where, file_image
from laya_robustness.loaders.problems import FAILED, RowErrors, attempt, each, row_problems
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.rows import OPEN_LABEL, PRIMITIVES, RECORD_FIELDS, Row, RowError, user_meta_problem

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
                                      f"field (far longer than any real question, option or context)", TOO_LONG)
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


def _given(value) -> bool:
    """Whether a checked list field holds something (it is neither absent nor failed its own check)."""
    return value is not None and value is not FAILED


def _open_gold(record, options, answers, label, where: Where, found: list) -> tuple[list[str], int, list[str]]:
    """An open row: no options, a non-empty list of answers, label -1 (or none); each problem kept in ``found``."""
    if _given(options) and options:
        found.append(where.error("options", "an open row has no options (its accepted answers go in 'answers')"))
    if answers is not FAILED and not answers:
        need = "an open row needs a non-empty list of accepted answers"
        missing = "null" if "answers" in record else _missing(record, "answers")
        found.append(where.error("answers", f"{missing} ({need})" if answers is None else need))
    if label not in (None, OPEN_LABEL, FAILED):
        found.append(where.error("label", f"an open row has label {OPEN_LABEL} or none (it has no option index), "
                                          f"got {label}"))
    return [], OPEN_LABEL, answers


def _choice_options(record, primitive: str, options, answers, where: Where) -> RowError | None:
    """The problem of a choice / noul row's options (None: none, or they failed their own check)."""
    if options is None:
        looks_open = " (a row with accepted answers and no options needs \"primitive\": \"open\")" if answers else ""
        problem = "expected a list of strings, got null" if "options" in record else _missing(record, "options")
        return where.error("options", problem + looks_open)
    if options is FAILED:
        return None
    if len(options) < 2:
        return where.error("options", f"need at least two non-empty strings, got {len(options)}")
    if primitive == "noul" and [o.lower() for o in options] != NOUL_OPTIONS:
        return where.error("options", f"a noul row has the options {NOUL_OPTIONS}, got {options}")
    return None


def _choice_gold(record, primitive: str, options, answers, label, where: Where,
                 found: list) -> tuple[list[str], int, list[str]]:
    """A choice / noul row: at least two options, a label indexing them, no answers; each problem kept in
    ``found`` (the label's range only against options that are there)."""
    problem = _choice_options(record, primitive, options, answers, where)
    if problem is not None:
        found.append(problem)
    looks_open = options is None and _given(answers) and answers  # the options' problem says to make it open
    if _given(answers) and answers and not looks_open:
        found.append(where.error("answers", f"only open rows have answers; a {primitive} row's gold is its label"))
    if label is None and not looks_open:
        null = "expected an int (the gold option's index), got null"
        found.append(where.error("label", null if "label" in record else _missing(record, "label")))
    elif label not in (None, FAILED) and _given(options) and len(options) >= 2 and not 0 <= label < len(options):
        found.append(where.error("label", f"{label} is not an index into {len(options)} options"))
    return options, label, []


def _primitive(record, where: Where) -> str:
    primitive = record.get("primitive", "choice")
    if primitive not in PRIMITIVES:
        raise where.error("primitive", f"{primitive!r} is not one of {', '.join(PRIMITIVES)}")
    return primitive


def row_kind(record: Mapping[str, Any]) -> str:
    """The kind of row ``record`` is (its ``primitive``, else open when it has answers and no options, else
    choice): the kind whose fixes its problems are given."""
    primitive = record.get("primitive")
    if primitive in PRIMITIVES:
        return primitive
    return "open" if record.get("answers") and not record.get("options") else "choice"


def _meta(record, where: Where) -> dict:
    """The row's meta (``{}`` for none); every key a family reads that holds the wrong value is a problem."""
    meta = {} if record.get("meta") is None else record["meta"]
    if not isinstance(meta, dict):
        raise where.error("meta", f"expected an object, got {kind(meta)}")
    problems = [user_meta_problem(key, value) for key, value in meta.items()]
    found = [where.error(f"meta.{p[0]}", p[1]) for p in problems if p is not None]
    if found:
        raise RowErrors(found)
    return meta


def record_row(record: Mapping[str, Any], where: Where, images: Callable[[Any], tuple[ImageRef, ...]],
               *, ints_as_ids: bool = False) -> SourceRow:
    """Validate ``record`` (keys are row fields) into a SourceRow; ``images`` turns the images value into refs.

    ``ints_as_ids``: int ``row_id`` / ``group_id`` / ``cluster`` values are read as text (table columns). Every
    field is checked; a bad row raises the RowErrors of all its problems, each with the fix for the row's kind.
    """
    found: list[RowError] = []
    text = functools.partial(attempt, found, _text, record)
    dataset = text("dataset", where, required=True)
    row_id = text("row_id", where, required=True, ints_as_text=ints_as_ids)
    question = text("question", where, required=True)
    group_id = text("group_id", where, required=False, ints_as_text=ints_as_ids)
    cluster = text("cluster", where, required=False, ints_as_text=ints_as_ids)
    primitive = attempt(found, _primitive, record, where)
    options = attempt(found, _string_list, record, "options", where)
    answers = attempt(found, _string_list, record, "answers", where)
    label = attempt(found, _label, record, where)
    if primitive is not FAILED:  # the gold is checked as the row's kind needs it
        gold = (options, answers, label, where, found)
        options, label, answers = (_open_gold(record, *gold) if primitive == "open"
                                   else _choice_gold(record, primitive, *gold))
    context, category = (attempt(found, _optional_text, record, name, where) for name in ("context", "category"))
    meta = attempt(found, _meta, record, where)
    refs = attempt(found, images, record.get("images"))
    if found:
        raise row_problems(found, row_kind(record))
    row = Row(row_id=row_id, dataset=dataset, group_id=group_id or row_id, cluster=cluster or row_id, images=(),
              question=question, options=tuple(options), label=label, primitive=primitive,
              context=context or None, category=category, meta=meta, answers=tuple(answers))
    return SourceRow(row, refs, where)


def duplicate(row_id: str, where: Where, seen: dict) -> RowError | None:
    """The problem of a row id read before (naming both places; ``seen``: the ids read so far, where), else None."""
    first = seen.setdefault(row_id, where)
    if first is where:
        return None
    field = "'index'" if where.path.suffix == ".tsv" and first.path == where.path else "'row_id'"
    return where.error("row_id", f"{row_id!r} is also the row_id of {first} (row ids must be unique across every "
                                 f"file of --data)", fix=f"give one of the two rows ({first}, {where}) another {field}")


def manifest_images(where: Where, base_dir: Path, data_root: Path, settings: LoadSettings):
    """The images of a manifest record: a list of paths relative to ``base_dir``."""

    def refs(value: Any) -> tuple[ImageRef, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise where.error("images", f"expected a list of relative paths, got {kind(value)}")
        return each(one, value, "images")

    def one(item: Any, field_name: str) -> ImageRef:
        if not isinstance(item, str):
            raise where.error(field_name, f"expected a relative path, got {kind(item)}")
        return file_image(where, field_name, item, base_dir, data_root, settings)

    return refs


#: Keys other datasets give a row's right answer under.
ANSWER_KEYS = ("answer", "answer_idx", "answer_index", "answer_id", "gold", "correct", "correct_answer", "target",
               "solution", "ground_truth")


def suggested_field(key: str, record: Mapping[str, Any]) -> str | None:
    """The row field an unknown ``key`` most likely means, for this row's kind: a right answer is a choice row's
    ``label`` (it has ``options``) and an open row's ``answers``; else the closest field's name (None: none).

    >>> suggested_field("answer", {"options": ["a", "b"]}), suggested_field("answer", {}), suggested_field("xyz", {})
    ('label', 'answers', None)
    """
    close = difflib.get_close_matches(key, RECORD_FIELDS, n=1)
    return _answer_field(key, record) or (close[0] if close else None)


def _answer_field(key: str, record: Mapping[str, Any]) -> str | None:
    """``label`` or ``answers`` where ``key`` is another dataset's name for a right answer and the row lacks it."""
    if key.lower() in ANSWER_KEYS:
        if "options" in record and "label" not in record:
            return "label"
        if "options" not in record and "answers" not in record:
            return "answers"
    return None


#: What a suggested field is, where the key it stands for is a right answer under another dataset's name.
ANSWER_FIELDS = {"label": "a choice row's right answer: the index of the right option in 'options', from 0",
                 "answers": "an open row's right answers: a list of the accepted texts"}


def field_hint(key: str, record: Mapping[str, Any]) -> str:
    """What to write instead of an unknown ``key``, for this row's kind (``suggested_field``), or "".

    >>> field_hint("answer", {"question": "q", "options": ["a", "b"]})
    "did you mean 'label' (a choice row's right answer: the index of the right option in 'options', from 0)? "
    >>> field_hint("answer", {"question": "q"})
    "did you mean 'answers' (an open row's right answers: a list of the accepted texts)? "
    >>> field_hint("qestion", {})
    "did you mean 'question'? "
    """
    answer, field = _answer_field(key, record), suggested_field(key, record)
    if field is None:
        return ""
    return f"did you mean {field!r}{f' ({ANSWER_FIELDS[answer]})' if answer else ''}? "


def unknown_fields(record: Mapping[str, Any], where: Where) -> list[RowError]:
    """A problem for each manifest key that is not a row field, its fix a "did you mean" that fits the row's kind."""
    fields = f"the fields: {', '.join(RECORD_FIELDS)}; put anything else under 'meta'"
    return [where.error(key, "unknown field", fix=f"{field_hint(key, record)}({fields})")
            for key in record if key not in RECORD_FIELDS]


def manifest_row(record: Mapping[str, Any], base_dir: Path, data_root: Path, path, line: int | None,
                 settings: LoadSettings) -> SourceRow:
    """One JSONL manifest record: known fields only, image paths relative to ``base_dir``. A bad record raises the
    RowErrors of every problem of the line (a field an unknown key likely means is not also said to be missing)."""
    where = Where(Path(path), line)
    unknown = unknown_fields(record, where)
    try:
        row = record_row(record, where, manifest_images(where, base_dir, data_root, settings))
    except RowErrors as exc:
        meant = {suggested_field(p.field_name, record) for p in unknown}
        kept = [p for p in exc.problems if not (p.field_name in meant and p.problem.startswith("missing"))]
        raise row_problems(unknown + kept, row_kind(record)) from None
    if unknown:
        raise row_problems(unknown, row_kind(record))
    return row
