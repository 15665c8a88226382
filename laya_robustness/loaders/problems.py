"""The problems of a ``--data`` source, collected over every field, row and file and raised together as one
``RowErrors``: each with its file, line (or table row), field and fix, the first ``SHOWN`` in file and line order,
the others counted; reading stops at ``COUNT_CAP`` problems, so a million bad rows are not all read to be counted.

>>> problems = Problems()
>>> problems.add(RowError("rows.jsonl", 2, "question", "empty"))
>>> problems.add(RowError("rows.jsonl", 1, "label", "3 is not an index into 2 options", fix="an index from 0"))
>>> print(problems.error())
2 problems in rows.jsonl:
  rows.jsonl:1: field 'label': 3 is not an index into 2 options
    fix: an index from 0
  rows.jsonl:2: field 'question': empty
    fix: 'question': the question's text, not empty
  the fields each kind of row needs, in each kind of file: docs/data.md#required-fields
"""

from __future__ import annotations

from typing import Any, Callable

from laya_robustness.loaders.fixes import with_fix
from laya_robustness.rows import RowError

#: The problems a report prints; the others are counted.
SHOWN = 20
#: The problems found before reading stops.
COUNT_CAP = 1000
#: The page that lists the fields each kind of row needs, in each kind of file.
FIELDS_PAGE = "docs/data.md#required-fields"
#: What a check of one field gives when it failed (its RowError is kept).
FAILED = object()


class RowErrors(RowError):
    """Every problem found in a data source (``problems``, in file and line order), raised once everything was read,
    or once ``COUNT_CAP`` were found (``stopped``). A RowError naming its first problem's file, line and field, so
    code that catches RowError catches it; ``str()`` is the report."""

    def __init__(self, problems: list[RowError], stopped: bool = False):
        problems = [q for p in problems for q in flat(p)]
        first = problems[0]
        super().__init__(first.path, first.line, first.field_name, first.problem, unit=first.unit, fix=first.fix)
        self.problems, self.stopped = problems, stopped

    def __str__(self) -> str:
        n = len(self.problems)
        indent = "" if n == 1 else "  "
        head = [] if n == 1 else [self._head()]
        body = [f"{indent}{line}" for p in self.problems[:SHOWN] for line in _lines(p)]
        if n > SHOWN:
            why = (f"counted before reading stopped at {COUNT_CAP:,} problems" if self.stopped
                   else "(every file was read to its end)")
            body.append(f"{indent}... and {n - SHOWN:,} more {why}")
        return "\n".join([*head, *body, f"  the fields each kind of row needs, in each kind of file: {FIELDS_PAGE}"])


    def _head(self) -> str:
        """``5 problems in 2 files, the first 20 shown:``."""
        files = list(dict.fromkeys(p.path for p in self.problems))
        count = f"{'at least ' if self.stopped else ''}{len(self.problems):,} problems"
        where = files[0] if len(files) == 1 else f"{len(files)} files"
        return f"{count} in {where}{f', the first {SHOWN} shown' if len(self.problems) > SHOWN else ''}:"


def _lines(problem: RowError) -> list[str]:
    return [str(problem)] + ([f"  fix: {problem.fix}"] if problem.fix else [])


def flat(exc: RowError) -> list[RowError]:
    """The problems ``exc`` stands for: its own, or each of a RowErrors'."""
    return list(exc.problems) if isinstance(exc, RowErrors) else [exc]


def attempt(found: list[RowError], check: Callable[..., Any], *args, **kwargs) -> Any:
    """``check(*args, **kwargs)``'s value, or FAILED with its problems kept in ``found``: one check of a row that
    does not stop the row's other checks."""
    try:
        return check(*args, **kwargs)
    except RowError as exc:
        found.extend(flat(exc))
        return FAILED


def each(check: Callable[[Any, str], Any], items, field_name: str) -> tuple:
    """``check(item, "<field_name>[i]")`` of every item, or the RowErrors of all their problems: each item of a
    list field checked, however many fail."""
    found: list[RowError] = []
    out = tuple(attempt(found, check, item, f"{field_name}[{i}]") for i, item in enumerate(items))
    if found:
        raise RowErrors(found)
    return out


def row_problems(found: list[RowError], row_kind: str | None) -> RowErrors:
    """The problems of one row (``found``), each given the fix for its field in a row of ``row_kind``."""
    return RowErrors([with_fix(p, row_kind) for p in found])


class Problems:
    """The problems found so far while reading a data source: ``add`` each, ``raise_any`` once everything is read."""

    def __init__(self):
        self.found: list[RowError] = []

    def add(self, exc: RowError) -> None:
        """Keep ``exc``'s problems (given the fix for their field where they have none); at ``COUNT_CAP`` problems
        stop reading: raise them."""
        self.found.extend(with_fix(p) for p in flat(exc))
        if len(self.found) >= COUNT_CAP:
            raise self.error(stopped=True)

    def error(self, stopped: bool = False) -> RowErrors:
        """The problems found, in file and line order (a file's problems without a line first), as one RowErrors."""
        files = {path: i for i, path in enumerate(dict.fromkeys(p.path for p in self.found))}
        ordered = sorted(self.found, key=lambda p: (files[p.path], -1 if p.line is None else p.line))
        return RowErrors(ordered, stopped)

    def raise_any(self) -> None:
        """Raise the problems found, if any."""
        if self.found:
            raise self.error()
