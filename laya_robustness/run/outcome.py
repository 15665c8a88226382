"""What a gate run ends with, as values: ``Ending`` (how the caller's side of the run ended: its own exit status, an
early stop, what narrowed its selection, whether it judged nothing) goes in, ``RunOutcome`` (each device's reports,
the scope, the exit status, the harness errors, what was written and kept) comes out of ``GateRun.finish``.

The pytest plugin, ``run_gate``, the Trainer callback and the xdist controller each make an ``Ending`` and adapt
the ``RunOutcome``; the report writer (``report.folder.write_reports``) reads the outcome only. The exit status is
decided here, once:

    exit_status = 3 (a harness error) if any harness error
                  else the nothing-judged status (4 or 3) if the run judged nothing
                  else 1 (a limit crossed) if the caller's status is 0 and a check it did not judge failed in the
                       earlier run whose verdicts it folds in (``Folded``: a narrowed pytest run)
                  else the caller's own status (0, 1 a limit crossed, pytest's 2 when interrupted, ...)

>>> ending = Ending(status=1)
>>> outcome = RunOutcome.decided(ending, reports={}, scopes={}, incomplete_reason=None, harness_errors=())
>>> outcome.exit_status, outcome.complete
(1, True)
>>> outcome.with_errors(["cannot write the reports"]).exit_status
3
>>> replace(outcome, caller_status=0, folded=Folded("reports", 5, ("text/a max_flip: 0.3 > 0.1",))).exit_status
1
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from laya_robustness.records import Record
from laya_robustness.run.errors import EXIT_HARNESS, EXIT_LIMIT_CROSSED
from laya_robustness.run.judged import NothingJudged
from laya_robustness.run.scope import Scope


@dataclass(frozen=True)
class Ending:
    """How the caller's side of a run ended. ``status``: its own exit status (pytest's, or 1 when ``run_gate``
    saw a limit crossed); ``ended``: why the run ended before its checks did (an interruption, an internal error),
    ``stopped``: why it stopped early on purpose (``-x``, a lost endpoint); ``narrowed_by``: the selection options
    that left cells out (``-k negation``); ``nothing_judged``: set when no check reached a verdict."""

    status: int = 0
    ended: str | None = None
    stopped: str | None = None
    narrowed_by: tuple[str, ...] = ()
    nothing_judged: NothingJudged | None = None


@dataclass(frozen=True)
class Folded:
    """What a run narrowed by test selection takes from the earlier run in its report folder (``source``) for the
    checks it did not judge: how many verdicts it took (``taken``) and the failing ones (``failures``: ``family/dataset
    check: detail``); or why it took none (``refused``: another configuration, no earlier run, ...)."""

    source: str
    taken: int = 0
    failures: tuple[str, ...] = ()
    refused: str | None = None


@dataclass(frozen=True)
class DeviceReport:
    """One device's reports as values: summary.json (meta included), checks.json, invariance.json (None without a
    condition), the records of predictions.jsonl.gz (ordered by row id) and the folder under the report folder they
    go to (``""`` when one device reports, else the device's name)."""

    device: str
    folder: str
    summary: dict | None
    checks: dict | None
    invariance: dict | None
    records: tuple[Record, ...] = ()

    @property
    def results(self) -> list[dict]:
        """The check results of this device (checks.json's ``results``)."""
        return list((self.checks or {}).get("results", ()))

    @property
    def conditions(self) -> dict:
        """The invariance stats of this device by condition (invariance.json's ``conditions``)."""
        return dict((self.invariance or {}).get("conditions", {}))


@dataclass(frozen=True)
class RunOutcome:
    """Everything a gate run ends with (see the module doc). ``reports``: device -> ``DeviceReport``; ``scopes``:
    device -> ``run.scope.Scope``; ``known``: (family, dataset, check) -> the reason of the declared known
    limitation of each judged check that has one; ``source_rows``: the question rows by dataset (report.html shows
    them); ``report_dir``: the run's ``--report-dir``; ``journal_given``: whether ``--journal`` names a journal of
    the user's own (kept); ``scorer_stats``: the scorers' counters; ``written`` and ``kept_previous_report``: what
    writing the reports did (empty until they are written); ``caller_status`` and ``nothing_judged``: how the
    caller's side ended, which with the harness errors and the earlier verdicts it ``folded`` in decide
    ``exit_status``."""

    reports: Mapping[str, DeviceReport]
    scopes: Mapping[str, Scope]
    incomplete_reason: str | None
    harness_errors: tuple[str, ...]
    lock_notes: tuple[str, ...] = ()
    known: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    source_rows: Mapping[str, list] = field(default_factory=dict, repr=False)
    report_dir: Path = Path("reports")
    journal_given: bool = False
    scorer_stats: Mapping[str, dict] = field(default_factory=dict)
    nothing_judged: NothingJudged | None = None
    written: tuple[Path, ...] = ()
    kept_previous_report: bool = False
    caller_status: int = 0
    folded: Folded | None = None

    @classmethod
    def decided(cls, ending: Ending, **values) -> "RunOutcome":
        """The outcome of a run that ended as ``ending`` says, its exit status decided (see the module doc)."""
        return cls(nothing_judged=ending.nothing_judged, caller_status=ending.status, **values)

    @property
    def exit_status(self) -> int:
        """The run's exit status, decided from its harness errors, whether it judged nothing and the caller's
        status (see the module doc)."""
        if self.harness_errors:
            return EXIT_HARNESS
        if self.nothing_judged is not None:
            return self.nothing_judged.status
        if self.caller_status == 0 and self.folded is not None and self.folded.failures:
            return EXIT_LIMIT_CROSSED
        return self.caller_status

    @property
    def complete(self) -> bool:
        """Whether the run covered all it set out to do (its reports say ``complete: true``)."""
        return self.incomplete_reason is None

    @property
    def summaries(self) -> dict[str, dict]:
        """summary.json of each device that has one."""
        return {device: r.summary for device, r in self.reports.items() if r.summary is not None}

    def known_limitation(self, family: str, dataset: str, check: str) -> str | None:
        """The reason of the declared known limitation of a judged check, or None."""
        return self.known.get((family, dataset, check))

    def results(self, device: str | None = None) -> list[dict]:
        """The check results of ``device`` (every device's when None), as checks.json holds them."""
        return [r for d, report in sorted(self.reports.items()) if device in (None, d) for r in report.results]

    def with_errors(self, errors: Sequence[str]) -> "RunOutcome":
        """The outcome with harness errors that came after the run ended (writing its reports)."""
        added = tuple(e for e in errors if e not in self.harness_errors)
        if not added:
            return self
        return replace(self, harness_errors=(*self.harness_errors, *added))

    def with_folded(self, folded: Folded | None) -> "RunOutcome":
        """The outcome with the earlier verdicts a narrowed run folds in (``Folded``)."""
        return replace(self, folded=folded)

    def with_written(self, written: Sequence[Path], kept_previous_report: bool, errors: Sequence[str] = ()
                     ) -> "RunOutcome":
        """The outcome once its reports are written (``report.folder.write_reports``): the paths, whether an
        earlier complete report was kept, and the errors writing met."""
        return replace(self, written=tuple(written), kept_previous_report=kept_previous_report).with_errors(errors)


def incomplete_reason(ending: Ending, harness_errors: Sequence[str], scopes: Mapping[str, Scope]) -> str | None:
    """Why a run's reports do not cover what it set out to do, or None: it ended before its checks did, met a
    harness error, was stopped early, judged nothing, or left a cell of a device's scope unjudged (in that order)."""
    if ending.ended:
        return ending.ended
    if harness_errors:
        return f"{len(harness_errors)} harness error(s): {harness_errors[0]}"
    if ending.stopped:
        return f"stopped early: {ending.stopped}"
    if ending.nothing_judged is not None:
        return ending.nothing_judged.message
    for device, scope in sorted(scopes.items()):
        if not scope.complete:
            return f"on {device} {scope.shortfall}"
    return None
