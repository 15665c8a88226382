"""Whether a run judged anything: a tally of the gate's checks (family cells, invariance conditions, --baseline
comparisons, the summary snapshot) asked for, judged and skipped with their reasons, and the verdict on a run that
judged none. A run that judged nothing never passes: its status is a usage error (exit 4) when its selection, options
or machine leave nothing to judge, and a harness error (exit 3) when rows were scored but every limit came back not
applicable (the model's outputs give the limits nothing to judge). A run narrowed by test selection (``-k``, ``-m``,
``--lf``, ...) that judged checks but no cell (the family cells, or the summary snapshot over all of them) does not
pass either (``no_cell_judged``): a gate passes on its cells.

>>> tally = JudgedTally()
>>> tally.asked_for(skipped="a reason"); tally.asked_for(skipped="a reason")
>>> tally.asked_for(skipped="not in --families")
>>> tally.nothing_judged().status
4
>>> print(tally.nothing_judged().message)
nothing was judged: all 3 checks asked for were skipped (2: a reason; 1: not in --families)
>>> tally.asked_for(judged=True); tally.nothing_judged() is None
True
>>> print(no_cell_judged(tally, ["-k invariance"]).message)
no cell was judged: -k invariance left out every family test and the summary snapshot, and a gate passes on its \
cells (the 1 check it judged holds)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from laya_robustness.run.errors import EXIT_HARNESS, EXIT_USAGE

#: The reason of a gpu-marked check skipped on a machine without CUDA (the pytest plugin's skip reason). When most
#: checks asked for skipped for it (``-m gpu``), the message leads with it.
NO_CUDA = "no CUDA device: the gpu tests cannot run here (torch.cuda.is_available() is False)"
#: At most this many distinct skip reasons are named in the message; the rest are counted.
NAMED_REASONS = 3


@dataclass(frozen=True)
class NothingJudged:
    """A run that judged no check: its exit ``status`` (4 or 3) and the ``message`` saying why."""

    status: int
    message: str


@dataclass
class JudgedTally:
    """The checks a run asked for: ``asked``, ``judged`` (reached a verdict: pass, fail, xfail, xpass, a snapshot
    compared), ``not_applicable`` (scored, every limit not applicable) and the ``skipped`` reasons, counted."""

    asked: int = 0
    judged: int = 0
    not_applicable: int = 0
    skipped: Counter = field(default_factory=Counter)
    cells: int = 0  # the judged checks that judged cells: a family cell, or the summary snapshot (every cell)

    def asked_for(self, *, judged: bool = False, skipped: str | None = None, not_applicable: bool = False,
                  cell: bool = False) -> None:
        """Count one check: judged, skipped with its reason, or scored with every limit not applicable; ``cell``:
        a check of cells (a family cell, the summary snapshot)."""
        self.asked += 1
        self.judged += bool(judged)
        self.cells += bool(judged and cell)
        self.not_applicable += bool(not_applicable)
        if skipped is not None and not not_applicable:
            self.skipped[skipped] += 1

    def merge(self, other: dict) -> None:
        """Add another process's tally (``as_dict()``'s form: an xdist worker's)."""
        self.asked += other["asked"]
        self.judged += other["judged"]
        self.cells += other.get("cells", 0)
        self.not_applicable += other["not_applicable"]
        self.skipped.update(other["skipped"])

    def as_dict(self) -> dict:
        return {"asked": self.asked, "judged": self.judged, "cells": self.cells, "not_applicable": self.not_applicable,
                "skipped": dict(self.skipped)}

    def nothing_judged(self) -> NothingJudged | None:
        """None when a check was judged or none was asked for; else the status and the message (see the module)."""
        if self.judged or not self.asked:
            return None
        if self.not_applicable:
            return NothingJudged(EXIT_HARNESS, f"nothing was judged: {self.not_applicable} of {self.asked} checks were "
                                               "scored but every limit was not applicable to what the model gave "
                                               f"(see each check's reason){self._reasons(', and the rest skipped')}")
        if 2 * self.skipped[NO_CUDA] > self.asked:  # mostly gpu checks (-m gpu): the machine is the reason
            gpu = self.skipped.pop(NO_CUDA)
            message = (f"{NO_CUDA}: {gpu} of the {self.asked} checks asked for need one, and nothing was judged; "
                       f"run them on a machine with a CUDA device, or leave -m gpu out to gate on this machine's CPU"
                       f"{self._reasons('; the other checks were skipped')}")
            self.skipped[NO_CUDA] = gpu
            return NothingJudged(EXIT_USAGE, message)
        return NothingJudged(EXIT_USAGE, f"nothing was judged: all {self.asked} checks asked for were skipped"
                                         f"{self._reasons('')}")

    def _reasons(self, lead: str) -> str:
        if not self.skipped:
            return ""
        # by count, the gpu checks' twin of a cpu check last: it says nothing about why the cpu check skipped
        common = sorted(self.skipped.most_common(), key=lambda item: item[0] == NO_CUDA)
        named = "; ".join(f"{n}: {reason}" for reason, n in common[:NAMED_REASONS])
        rest = len(common) - NAMED_REASONS
        more = f"; and {rest} other reason{'s' if rest > 1 else ''}" if rest > 0 else ""
        return f"{lead} ({named}{more})"


def no_cell_judged(tally: JudgedTally, selected_by, benchmarks: bool = False) -> NothingJudged | None:
    """A run whose test selection (``selected_by``: ``-k invariance``, ``--lf``, ...) left out every family test of the
    gate and its summary snapshot, so it judged no cell (only invariance conditions or --baseline comparisons, or only
    ran ``benchmarks``): a usage error (exit 4) saying so, or None when it judged a cell or was not narrowed."""
    if tally.cells or not selected_by:
        return None
    if tally.judged:
        held = f"the {tally.judged} check{' it judged holds' if tally.judged == 1 else 's it judged hold'}"
    else:
        held = "it judged no check" + ("; its tests were benchmarks, throughput with no verdict: --benchmark-only "
                                       "runs them alone" if benchmarks else "")
    return NothingJudged(EXIT_USAGE, f"no cell was judged: {' '.join(selected_by)} left out every family test and "
                                     f"the summary snapshot, and a gate passes on its cells ({held})")
