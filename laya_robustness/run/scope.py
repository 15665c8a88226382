"""What one device's report covers: the (family, dataset) cells the run's ``--families`` and data ask for, those it
scored and those it judged, what narrowed them, and whether that makes the report complete.

A cell is judged when its family test reached a verdict (pass, fail, xfail, "no limit applies", or "the
family built no variant there"); a cell can be scored without being judged (the orig rows a family pairs with,
or the cells the summary snapshot scores). A report is complete only when every cell asked for was scored and
judged: a test selection (``-k``, ``--lf``, ``--deselect``, ``--sw``) or ``-x`` that leaves one out makes it
incomplete, whatever pytest's exit status. A cell whose family built no variant of any of its rows
(``built_nothing``, with the family's reason) has nothing to judge: the one-line description counts it apart
and names it with its reason.

>>> asked = [("orig", "a"), ("orig", "b"), ("negation", "a"), ("negation", "b")]
>>> scope = decide_scope(asked, scored=asked, judged=[("negation", "a"), ("negation", "b")],
...                      narrowed_by=["-k negation"])
>>> scope.complete
False
>>> scope.covered
'incomplete: 2 of 4 cells judged: negation (a, b); not judged: orig (a, b); narrowed by -k negation'
>>> decide_scope(asked, asked, asked).covered
'complete: all 4 cells of 2 families on 2 datasets scored and judged'
>>> decide_scope(asked, asked, asked, built_nothing={("negation", "b"): "no rule applies"}).covered
'complete: all 3 cells of 2 families on 2 datasets scored and judged; 1 built no variant: negation (b): no rule applies'
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

Cell = tuple[str, str]  # (family, dataset)

#: At most this many families are named in the one-line description; the rest are counted.
NAMED_FAMILIES = 6


def _by_family(cells: Iterable[Cell]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for family, dataset in sorted(set(cells)):
        out.setdefault(family, []).append(dataset)
    return out


def cells_text(cells: Iterable[Cell], named: int = NAMED_FAMILIES) -> str:
    """``negation (a, b), text (a)``: the cells by family, at most ``named`` families named.

    >>> cells_text([("b", "x"), ("a", "x"), ("a", "y"), ("c", "x")], named=2)
    'a (x, y), b (x) and 1 more family'
    """
    families = _by_family(cells)
    parts = [f"{family} ({', '.join(datasets)})" for family, datasets in list(families.items())[:named]]
    rest = len(families) - named
    if rest > 0:
        return ", ".join(parts) + f" and {rest} more famil{'y' if rest == 1 else 'ies'}"
    return ", ".join(parts) or "none"


def built_nothing_text(built_nothing: Mapping[Cell, str]) -> str:
    """``N built no variant: a (x, y), b (x): reason``: the cells whose family built no variant, each family's
    datasets together, the cells of one reason together (every family named); "" for none.

    >>> built_nothing_text({("b", "x"): "r1", ("a", "y"): "r1", ("a", "x"): "r1", ("c", "x"): "r2"})
    '4 built no variant: a (x, y), b (x): r1; c (x): r2'
    """
    if not built_nothing:
        return ""
    by_reason: dict[str, list[Cell]] = {}
    for cell, reason in sorted(built_nothing.items()):
        by_reason.setdefault(reason, []).append(cell)
    groups = [f"{cells_text(cells, named=len(cells))}: {reason}" for reason, cells in by_reason.items()]
    return f"{len(built_nothing)} built no variant: " + "; ".join(groups)


@dataclass(frozen=True)
class Scope:
    """The cells of one device's report (see the module doc)."""

    asked: frozenset[Cell]
    scored: frozenset[Cell]
    judged: frozenset[Cell]
    narrowed_by: tuple[str, ...] = ()
    cut_short: str | None = None  # why the run ended incomplete although its cells were judged (a harness error)
    #: the cells asked for, scored and judged whose family built no variant there -> the family's reason
    built_nothing: Mapping[Cell, str] = field(default_factory=dict, hash=False)

    @property
    def not_judged(self) -> frozenset[Cell]:
        """The cells asked for that were not both scored and judged."""
        return self.asked - (self.judged & self.scored)

    @property
    def complete(self) -> bool:
        return not self.not_judged and self.cut_short is None

    @property
    def covered(self) -> str:
        """What the report covers, in one line (its first line on the terminal, in summary.md and report.html); the
        cells whose family built no variant are counted apart and named last, with their reason."""
        asked = self.asked - set(self.built_nothing)
        built = f"; {built_nothing_text(self.built_nothing)}" if self.built_nothing else ""
        if not self.not_judged:
            families = len({f for f, _ in asked})
            datasets = len({d for _, d in asked})
            cells = (f"all {len(asked)} cells of {families} famil{'y' if families == 1 else 'ies'} on {datasets} "
                     f"dataset{'' if datasets == 1 else 's'} scored and judged")
            line = f"complete: {cells}" if self.cut_short is None else f"incomplete: {cells}, but {self.cut_short}"
            return line + built
        judged = (self.judged & self.asked & self.scored) - set(self.built_nothing)
        line = (f"incomplete: {len(judged)} of {len(asked)} cells judged: {cells_text(judged)}; "
                f"not judged: {cells_text(self.not_judged)}")
        return line + (f"; narrowed by {' '.join(self.narrowed_by)}" if self.narrowed_by else "") + built

    @property
    def shortfall(self) -> str | None:
        """Why the report is incomplete, for the run's ``incomplete_reason`` (None when complete).

        >>> decide_scope([("orig", "a"), ("text", "a")], [("orig", "a")], [("orig", "a")], ["--lf"]).shortfall
        'its tests judged 1 of 2 cells (not judged: text (a); narrowed by --lf)'
        """
        if self.complete:
            return None
        if not self.not_judged:
            return self.cut_short
        why = f"not judged: {cells_text(self.not_judged)}"
        why += f"; narrowed by {' '.join(self.narrowed_by)}" if self.narrowed_by else ""
        return f"its tests judged {len(self.judged & self.asked & self.scored)} of {len(self.asked)} cells ({why})"

    def meta(self) -> dict:
        """The ``scope`` block of summary.json's meta: cells by family, each list sorted; ``built_nothing``:
        family -> dataset -> the family's reason."""
        return {
            "complete": self.complete,
            "covered": self.covered,
            "cells_asked": len(self.asked),
            "judged": _by_family(self.judged),
            "scored": _by_family(self.scored),
            "not_judged": _by_family(self.not_judged),
            "narrowed_by": list(self.narrowed_by),
            "built_nothing": {family: {dataset: self.built_nothing[(family, dataset)] for dataset in datasets}
                              for family, datasets in _by_family(self.built_nothing).items()},
        }


def cut_short(scopes: dict, reason: str | None) -> dict:
    """``scopes`` (device -> Scope) with each complete one marked as cut short by ``reason`` (the run's own reason to
    be incomplete: a harness error, nothing judged), so no report says "complete" of a run that is not.

    >>> scope = decide_scope([("orig", "a")], [("orig", "a")], [("orig", "a")])
    >>> cut_short({"cpu": scope}, "a harness error")["cpu"].covered
    'incomplete: all 1 cells of 1 family on 1 dataset scored and judged, but a harness error'
    """
    if reason is None:
        return scopes
    return {device: replace(scope, cut_short=reason) if scope.complete else scope for device, scope in scopes.items()}


def decide_scope(asked: Iterable[Cell], scored: Iterable[Cell], judged: Iterable[Cell],
                 narrowed_by: Iterable[str] = (), built_nothing: Mapping[Cell, str] | None = None) -> Scope:
    """The scope of a report from the cells the run asks for, those it scored and those its tests judged;
    ``built_nothing``: the cells whose family built no variant there, with the family's reason (those asked for,
    scored and judged are kept)."""
    asked_, scored_, judged_ = (frozenset(map(tuple, cells)) for cells in (asked, scored, judged))
    empty = {tuple(cell): reason for cell, reason in (built_nothing or {}).items()
             if tuple(cell) in asked_ & scored_ & judged_}
    return Scope(asked_, scored_, judged_, tuple(narrowed_by), built_nothing=empty)
