"""One gate run and its work, without pytest: ``GateRun`` scores each (family, dataset, device) cell once
(``run.planned``: journaled chunk by chunk), judges its limits, runs the invariance conditions and the --baseline
comparison, keeps what it holds (``run.held``) and ends itself: ``finish(Ending)`` returns the ``RunOutcome`` every
adapter reads. The pytest plugin turns its answers into test outcomes; ``run_gate`` runs every cell in turn.

A check that cannot run here raises ``Skipped`` with the reason (pytest shows it as a skip); a judged cell comes
back as a ``CellCheck``, ``InvarianceCheck`` or ``RegressionCheck`` holding the results, which the caller turns
into its own outcome. Bad input is a ``UsageError`` (exit 4), a broken part a ``HarnessError`` (exit 3).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from laya_robustness.families import get_family
from laya_robustness.gate.judgement import Judgement, evaluate_cell, evaluate_invariance
from laya_robustness.gate.run_limits import regression_limits
from laya_robustness.gate.baseline_limits import regression_level, regression_results
from laya_robustness.gate.results import NOT_APPLICABLE, CheckResult
from laya_robustness.gate.verdict import Verdict, cell_verdict
from laya_robustness.metrics.baseline import ALL
from laya_robustness.records import ORIG, Record
from laya_robustness.run.held import Held
from laya_robustness.run.inputs.run_inputs import RunInputs
from laya_robustness.run.outcome import Ending, RunOutcome, incomplete_reason
from laya_robustness.run.planned import PlannedCells, RunParts
from laya_robustness.run.outputs.data_files import device_reports
from laya_robustness.run.outputs.lock import FolderHold, RunIdentity
from laya_robustness.run.outputs.meta import RunFacts
from laya_robustness.run.scope import cut_short
from laya_robustness.run.models import RunModels
from laya_robustness.run.scorers import ScorerPool
from laya_robustness.run.pipeline.image_store import rows_with_pixels
from laya_robustness.run.pipeline.invariance import DUAL_CONDITIONS, DUAL_PREFIX, ConditionNotSupported, limits_section
from laya_robustness.run.pipeline.scorer_sources import identity_key
from laya_robustness.summary import CellCache, family_cell, summarize


class Skipped(Exception):
    """A check that does not run in this configuration (a family not selected, no variant, no limit): the reason."""


class Quiet:
    """A progress tracker that shows nothing."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


#: ``progress(device, label, total)`` -> a tracker with ``update(n)`` and ``close()``.
Progress = Callable[[str, str, int], Any]


@dataclass(frozen=True)
class CellCheck:
    """One cell judged: its verdict, the records it was judged on and where its limits came from."""

    family: str
    dataset: str
    verdict: Verdict
    records: Sequence[Record]
    limits_files: tuple[Path, ...]


@dataclass(frozen=True)
class InvarianceCheck:
    """One invariance condition judged: its results and stats."""

    condition: str
    results: list[CheckResult]
    stats: dict


@dataclass(frozen=True)
class RegressionCheck:
    """One family against the --baseline: its results and the paired comparison they judged."""

    family: str
    results: list[CheckResult]
    cell: dict


def decided_nothing(check: "CellCheck | InvarianceCheck | RegressionCheck") -> bool:
    """Whether a judged cell, condition or regression decided nothing: every limit of it not applicable."""
    if isinstance(check, CellCheck):
        return check.verdict.outcome == NOT_APPLICABLE
    return bool(check.results) and all(r.decision == NOT_APPLICABLE for r in check.results)


def reported_condition(condition: str, source: str) -> str:
    """The name an invariance condition is reported under: its own for the question model, ``dual:<condition>``
    for the dual encoder (in invariance.json and checks.json alike)."""
    return condition if source == "rows" else f"{DUAL_PREFIX}{condition}"


class GateRun:
    """A gate run of ``settings`` (``run.inputs.options.Settings``): see the module doc.

    ``root``: the project root (the embedded default's files, the code commit in the reports); ``run``: the run
    this process belongs to (an xdist worker shares its controller's), ``worker``: its xdist worker id;
    ``progress`` makes a tracker per scored cell (a model loaded in memory comes in ``settings.in_memory``).
    ``inputs`` may come from an earlier run of the same rows, and ``variants`` (a dict) keeps the rows each family
    scores for a later one (a model gated again as it trains), so the rows are read and the variants built once (not
    those of a family that holds decoded images).
    """

    def __init__(self, settings, *, root: Path, run: RunIdentity | None = None, worker: str | None = None,
                 progress: Progress | None = None, inputs: RunInputs | None = None,
                 variants: dict | None = None):
        self._settings, self._root = settings, Path(root)
        self._run_identity, self._worker = run or RunIdentity.this_process(), worker
        self._progress: Progress = progress or (lambda device, label, total: Quiet())
        self._held = Held()  # records, cells scored and judged, results, invariance stats, errors (``run.held``)
        self._models = RunModels.of(settings, self._root)  # what the run knows about its models, found once
        self._scorers = ScorerPool(settings, self._models, self._held.harness_errors)
        self._inputs = inputs or RunInputs(settings, self._models.probes_captions(settings.families))
        self._folder = FolderHold(settings.report_dir, self._run_identity, settings.report_dir_wait, worker)
        self._invariance: dict[str, object] = {}
        self._parts = RunParts(settings, self._inputs, self._scorers, self._run_identity.token, variants)
        self._cells_of = PlannedCells(self._parts, self._held, worker, self._progress)  # each cell's rows and scoring; the planned ones streamed where they can
        self._n_interval_checks: int | None = None
        self._summary_cache: dict[str, tuple] = {}  # device -> (records key, summary): see records_summary
        self._cells = CellCache()  # the summary cells computed so far, shared by the checks and the summary

    # what the adapters read of the run: its configuration, read-only (its state only through the methods below)
    settings = property(lambda self: self._settings)
    root = property(lambda self: self._root)
    run_identity = property(lambda self: self._run_identity)
    models = property(lambda self: self._models,
                      doc="What the run knows about its models, found once (``run.models.RunModels``).")
    scorers = property(lambda self: self._scorers, doc="The run's scorers (``run.scorers.ScorerPool``).")
    executor = property(lambda self: self._scorers.run_executor,
                        doc="Where the run's rows are scored (``run.executors.base.Executor``): what it declares.")
    inputs = property(lambda self: self._inputs,
                      doc="The run's rows, limits and baseline (``run.inputs.run_inputs.RunInputs``).")
    kept_freed_memory = property(lambda self: self._parts.kept_freed_memory)
    identities = property(lambda self: self._scorers.identities)
    model_name = property(lambda self: self._scorers.model_name)

    def rows_of(self, family: str) -> dict:
        """The source rows a family is built from, by dataset (question rows or caption rows)."""
        return self._inputs.caption_rows if get_family(family).source == "captions" else self._inputs.rows

    def validate_inputs(self) -> None:
        """Read the rows, the limits and the --baseline now: their errors are usage errors before any work starts."""
        self._inputs.validate()

    # -- the report folder ----------------------------------------------------------------------

    def claim_report_dir(self, on_wait: Callable[[object], None] | None = None) -> None:
        """Hold (or check that this run still holds) the lock of ``--report-dir`` (``run.outputs.lock.FolderHold``);
        ``on_wait(holder)`` is told when another run holds it and this one waits. Raises ``UsageError`` or
        ``HarnessError``."""
        self._held.lock_notes += self._folder.claim(on_wait)

    def release_report_dir(self) -> None:
        """Stop renewing the lock; the run's main process (not an xdist worker) also removes it."""
        self._folder.release()

    def close(self) -> None:
        """Release the report folder and stop the run's Ray actors."""
        self._cells_of.close()
        self.release_report_dir()
        self._scorers.close()

    # -- scoring --------------------------------------------------------------------------------

    def source_of(self, family: str, dataset: str) -> str:
        """Which rows ``dataset`` belongs to (orig is scored on either kind)."""
        return self._parts.source_of(family, dataset)

    def plan(self, cells: Sequence[tuple[str, str, str]], then: bool = False) -> None:
        """The (family, dataset, device) cells the caller's checks will ask for, in order (``run.planned``); with
        ``then``, the cells asked after those planned before."""
        self._cells_of.plan(cells, then)

    def family_records(self, family: str, dataset: str, device: str) -> list[Record]:
        """The orig and ``family`` records of one dataset on one device (scored once per process)."""
        self._cells_of.score(ORIG, dataset, device)
        self._cells_of.score(family, dataset, device)
        orig = self._held.records_of(device, ORIG, dataset)
        return list(orig) if family == ORIG else [*orig, *self._held.records_of(device, family, dataset)]

    # -- checks ---------------------------------------------------------------------------------

    def check_family(self, family: str, dataset: str, device: str) -> CellCheck:
        """Evaluate every limit of (family, dataset): its verdict, or ``Skipped`` with the reason."""
        if family != ORIG and family not in self._settings.families:
            raise Skipped(f"{family} is not in --families ({','.join(self._settings.families)})")
        reason = self._models.skip_reason(family)
        if reason:
            raise Skipped(reason)
        limits = self._inputs.thresholds.limits_for(family, dataset)
        records = self.family_records(family, dataset, device)
        if not any(r.family == family for r in records):
            self._held.judged.add((family, dataset, device))  # nothing to judge
            raise Skipped(f"{family} builds no variant of any {dataset} row: {get_family(family).when_empty}")
        cell = family_cell(records, family, dataset, seed=self._settings.seed, cache=self._cells)
        if not limits:
            self._held.judged.add((family, dataset, device))
            raise Skipped(f"scored; the limits set none for {family} on {dataset}")
        results = evaluate_cell(family, dataset, cell, limits, self.judgement(family, dataset))
        self._held.judged.add((family, dataset, device))
        have = len(self.rows_of(family).get(dataset, ())) if family != ORIG else len(self._inputs.rows.get(dataset, ()))

        def known(check: str) -> str | None:
            limitation = self._inputs.thresholds.known_limitation(family, dataset, check)
            return limitation.reason if limitation else None

        self._held.results += [{**asdict(r), "device": device, "n_rows_have": have,
                                "known": known(r.check) is not None} for r in results]
        return CellCheck(family, dataset, cell_verdict(results, known), records,
                         (self._inputs.thresholds.path, *self._inputs.thresholds.overlays))

    def judgement(self, family: str, dataset: str) -> Judgement:
        """How the limits of one cell are judged (their judge, and alpha / m of the whole run)."""
        t = self._inputs.thresholds
        return Judgement(lambda check: t.judge_for(family, dataset, check), t.gate.alpha_each(self.n_interval_checks))

    def invariance(self, condition: str, device: str, source: str = "rows") -> dict:
        """The stats of one invariance condition of the ``source`` model on ``device`` (references computed
        once per process). The dual encoder is checked on caption rows, under the conditions it can take."""
        reason = invariance_skip_reason(self._models, condition, source)
        if reason:
            raise Skipped(reason)
        key = identity_key(device, source)
        if key not in self._invariance:
            rows = _invariance_rows(self._inputs.caption_rows if source == "captions" else self._inputs.rows,
                                    self._settings.invariance_rows, condition, source)
            self._invariance[key] = self._scorers.invariance_run(device, source, rows, self._settings.batch_size,
                                                                 self._settings.temperatures)
        try:
            stats = self._invariance[key].run(condition)
        except ConditionNotSupported as exc:
            raise Skipped(f"{condition} is not supported by this scorer: {exc}") from None
        except Exception as exc:
            raise self._scorers.harness_error(f"invariance condition {condition} on {device} with model "
                                       f"{self.model_name!r} failed: {type(exc).__name__}: {exc}") from exc
        self._held.invariance.setdefault(device, {})[reported_condition(condition, source)] = stats
        return stats

    def check_invariance(self, condition: str, device: str, source: str = "rows") -> InvarianceCheck:
        """Evaluate the condition's limits (a bf16 condition gets the ``[invariance.bf16]`` flip budget)."""
        stats = self.invariance(condition, device, source)
        section = limits_section(condition, stats["precision"])
        limits = self._inputs.thresholds.invariance_limits(section)
        if not limits:
            raise Skipped(f"scored; the limits set none in [invariance.{section}]")
        results = evaluate_invariance(condition, stats, limits)
        results = [replace(r, dataset=reported_condition(condition, source)) for r in results]
        self._held.results += [{**asdict(r), "device": device} for r in results]
        return InvarianceCheck(reported_condition(condition, source), results, stats)

    def run_cells(self) -> list[tuple[str, str]]:
        """Every (family, dataset) cell the run's family checks evaluate: orig on the question sets, and each
        selected family that can run on every dataset of its source."""
        cells = [] if self._models.is_dual else [(ORIG, d) for d in self._inputs.datasets]
        for family in self._settings.families:
            if not self._models.skip_reason(family):
                cells += [(family, d) for d in self.rows_of(family)]
        return cells

    @property
    def n_interval_checks(self) -> int:
        """m: how many limits of the whole run are judged on their interval (each gets alpha / m); the regression
        checks against a --baseline are a family of their own (``gate.baseline_limits``), so a run's limits are judged
        alike with or without one."""
        if self._n_interval_checks is None:
            t = self._inputs.thresholds
            m = sum(t.judge_for(f, d, check) == "interval" for f, d in self.run_cells() for check in t.limits_for(f, d))
            self._n_interval_checks = m
        return self._n_interval_checks

    def check_regression(self, family: str, device: str) -> RegressionCheck:
        """The family, over all its datasets, against the --baseline: its regression limits and the McNemar tests."""
        reason = regression_skip_reason(self, family)
        if reason:
            raise Skipped(reason)
        datasets = [d for f, d in self.run_cells() if f == family]
        # the family's records with the orig rows they pair with (a block cell such as lgip's needs them)
        records = [r for d in datasets for r in self.family_records(family, d, device)]
        summary = summarize(records, seed=self._settings.seed, baseline=self._inputs.baseline_records, cache=self._cells)
        cell = summary.get("baseline", {}).get(family, {}).get(ALL)
        gate = self._inputs.thresholds.gate
        limits = _regression_limits(gate, family, cell)
        results = regression_results(family, cell, limits, regression_level(gate, [f for f, _ in self.run_cells()]))
        self._held.results += [{**asdict(r), "device": device, "n_rows_have": None, "known": False} for r in results]
        return RegressionCheck(family, results, cell)

    # -- what this process holds, for the adapters ---------------------------------------------------

    def set_kept_freed_memory(self, kept: bool) -> None:
        """Whether malloc keeps freed memory in this process (``scoring.malloc``): variant images are then given
        back as soon as no row needs them."""
        self._parts.kept_freed_memory = kept

    def is_scored(self, family: str, dataset: str, device: str) -> bool:
        """Whether (family, dataset, device) was scored in this process (or by an xdist worker whose records were
        merged)."""
        return (family, dataset, device) in self._held.scored

    def has_reports(self) -> bool:
        """Whether the run has anything to report: records or invariance stats (its xdist workers' included)."""
        return bool(self._held.devices())

    def note_harness_error(self, message: str) -> None:
        """A harness error (exit 3) met outside the run's own work (comparing a snapshot, claiming the report
        folder at the end), kept with the run's."""
        self._held.note_harness_error(message)

    def worker_payload(self) -> dict:
        """What this process (an xdist worker) hands the controller's run (``merge_worker``), JSON-ready."""
        return {**self._held.payload(), "identities": self.identities, "stats": self._scorers.scorer_stats()}

    def merge_worker(self, data: dict) -> None:
        """Add what an xdist worker's run did (``worker_payload``, parsed from JSON): what it held (``Held.merge``),
        its scorers' identities and counters."""
        self._held.merge(data)
        self._scorers.add_identities(data["identities"])
        for key, counts in data["stats"].items():
            summed = self._scorers.worker_stats.setdefault(key, {})
            for name, value in counts.items():
                summed[name] = summed.get(name, 0) + value

    # -- the end of the run -----------------------------------------------------------------------------

    def finish(self, ending: Ending) -> RunOutcome:
        """What the run ends with (``run.outcome.RunOutcome``), given how the caller's side of it ended: its
        scope (``Held.scopes`` of the cells ``run_cells`` asks for), why it is incomplete (if it is), each
        device's reports and the exit status."""
        held, reports = self._held, {}
        scopes = held.scopes(self.run_cells(), ending.narrowed_by) if self.has_reports() else {}
        reason = incomplete_reason(ending, held.harness_errors, scopes)
        scopes = cut_short(scopes, reason)
        if self.has_reports():
            gate_meta = lambda: {"interval_checks": self.n_interval_checks,  # noqa: E731
                                 "alpha": self._inputs.thresholds.gate.alpha, "gate": asdict(self._inputs.thresholds.gate)}
            reports = device_reports(held, self._facts(), reason, scopes, self._summary, gate_meta)
        known = {(r["family"], r["dataset"], r["check"]): hit.reason for r in held.results
                 if (hit := self._inputs.thresholds.known_limitation(r["family"], r["dataset"], r["check"])) is not None}
        return RunOutcome.decided(
            ending, reports=reports, scopes=scopes, incomplete_reason=reason,
            harness_errors=tuple(held.harness_errors), lock_notes=tuple(held.lock_notes), known=known,
            source_rows=self._inputs.rows if reports else {}, report_dir=Path(self._settings.report_dir),
            journal_given=bool(self._settings.journal), scorer_stats=self._scorers.scorer_stats())

    def _summary(self, device: str, records: dict, meta: dict) -> dict:
        """summary.json of one device: the snapshot's summary when no --baseline or ECE floor adds to it."""
        s = self._settings
        if s.baseline is None and not s.ece_floor_sims:
            return {**self.records_summary(device), "meta": meta}
        baseline = self._inputs.baseline_records if s.baseline is not None else None
        return summarize([records[k] for k in sorted(records)], meta=meta, seed=self._settings.seed,
                         ece_floor_sims=s.ece_floor_sims, baseline=baseline)

    def _facts(self) -> RunFacts:
        """What the reports' meta blocks say of this run (``run.outputs.meta.RunFacts``)."""
        return RunFacts(self._settings, self._inputs.rows, self._inputs.caption_rows, self._inputs.spec.inputs_meta(),
                        dict(self.identities), self.model_name, self._root,
                        {device: self._scorers.executor_meta(device) for device in self._held.devices()})

    # -- summaries ------------------------------------------------------------------------------

    def full_summary(self, device: str) -> dict:
        """The summary of every selected family that can run, on every dataset of its source (scoring
        whatever is missing), with orig on the caption sets the lgip families pair with."""
        for family, dataset in self.run_cells():
            self.family_records(family, dataset, device)
        return self.records_summary(device)

    def records_summary(self, device: str) -> dict:
        """``summarize`` of every record of ``device`` held now (no meta, no floor, no baseline), computed
        once per set of records: the snapshot and the reports share it."""
        records = self._held.records.get(device, {})
        key = (device, len(records), hash(tuple(sorted(records))))
        if self._summary_cache.get(device, (None,))[0] != key:
            self._summary_cache[device] = (key, summarize(list(records.values()), seed=self._settings.seed, cache=self._cells))
        return self._summary_cache[device][1]


def invariance_skip_reason(models: RunModels, condition: str, source: str) -> str | None:
    """Why an invariance condition of the ``source`` model ("rows" or "captions") does not run, or None."""
    if source == "rows" and models.is_dual:
        return "--model is a dual encoder: its invariance conditions run in test_dual_invariance"
    if source == "captions" and models.dual_model is None:
        return models.no_dual_reason("test_dual_invariance")
    if source == "captions" and condition not in DUAL_CONDITIONS:
        return f"{condition} needs rows with several or no images, which a dual encoder does not score"
    return None


def _invariance_rows(rows_by_dataset: dict, n: int, condition: str, source: str) -> list:
    """The first ``n`` rows with pixels of each dataset, which the invariance conditions score; Skipped when none."""
    rows = rows_with_pixels([r for name in rows_by_dataset for r in rows_by_dataset[name][:n]])
    if not rows:
        what = "caption rows (no lgip family is selected)" if source == "captions" else "rows"
        raise Skipped(f"no {what} to score {condition} on")
    return rows


def regression_skip_reason(run: GateRun, family: str) -> str | None:
    """Why ``family`` is not compared with the --baseline in ``run``, or None."""
    if run.settings.baseline is None:
        return "no --baseline to compare with"
    if family != ORIG and family not in run.settings.families:
        return f"{family} is not in --families ({','.join(run.settings.families)})"
    return None if family == ORIG else run.models.skip_reason(family)


def _regression_limits(gate, family: str, cell: dict | None) -> list:
    """The [gate] regression limits that apply to ``family``'s paired comparison ``cell``; Skipped saying why
    when there is none to judge."""
    if not cell:
        raise Skipped(f"the baseline has none of this run's {family} rows")
    limits = regression_limits(gate, family, cell)
    if not limits and not cell["n_groups"]:
        raise Skipped(f"no {family} row has a right answer (a caption has none): its accuracy cannot regress")
    if not limits:
        raise Skipped(f"the limits set no [gate] regression limit that applies to {family}")
    return limits
