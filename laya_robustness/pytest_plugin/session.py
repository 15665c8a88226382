"""The gate's per-process state: settings, rows, limits, scorers and records, kept in ``config.stash``.

The session wires things together; the library computes (summary, checks) and decides
(``laya_robustness.verdict``). Reports, the snapshot and the xdist payload have their own modules.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from laya_robustness import checks
from laya_robustness.families import build_variants, declared
from laya_robustness.invariance import BF16, BF16_BUDGET, CONDITION_NAMES, ConditionNotSupported, InvarianceRun
from laya_robustness.pytest_plugin.options import read_settings
from laya_robustness.records import ORIG, Record
from laya_robustness.rows import RowError
from laya_robustness.run import Scoring, load_source_rows
from laya_robustness.summary import summarize, summary_cell
from laya_robustness.thresholds import ThresholdsError, load_thresholds
from laya_robustness.verdict import FAIL, XFAIL, XPASS, cell_verdict

GPU_DEVICE = "cuda"
INVARIANCE_CONDITIONS = (*CONDITION_NAMES, BF16_BUDGET)


class HarnessError(RuntimeError):
    """The harness broke (a model that cannot load, a crash while scoring): not a gate failure (exit 3)."""


class RobustnessSession:
    """Loads what a gate run needs once per process and scores each (family, dataset, device) once."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = read_settings(config)
        self._rows = None
        self._thresholds = None
        self._scorers: dict[str, object] = {}
        self._load_errors: dict[str, str] = {}  # device -> why its scorer could not load (not retried)
        self._scored: set[tuple[str, str, str]] = set()
        self.records: dict[str, dict[str, Record]] = {}  # device -> row_id -> record
        self.results: list[dict] = []  # check results of this process
        self.harness_errors: list[str] = []
        self.summaries: dict[str, dict] = {}  # device -> summary.json, once written
        self.identities: dict[str, dict] = {}  # device -> the loaded scorer's identity (also from workers)
        self.usage_error: pytest.UsageError | None = None
        self._invariance: dict[str, InvarianceRun] = {}
        self.invariance_results: dict[str, dict[str, dict]] = {}  # device -> condition -> stats
        self.written: list = []

    # settings the rest of the plugin reads by name
    seed = property(lambda self: self.settings.seed)
    rows_per_set = property(lambda self: self.settings.rows_per_set)
    families = property(lambda self: self.settings.families)
    default_device = property(lambda self: self.settings.device)
    model_name = property(lambda self: self.settings.model_name)
    report_dir = property(lambda self: self.settings.report_dir)

    # -- inputs ---------------------------------------------------------------------------------

    @property
    def rows(self) -> dict:
        """Sampled source rows by dataset; a bad data file is a usage error naming file, line and field."""
        if self._rows is None:
            try:
                self._rows = load_source_rows(self.settings.data, self.settings.rows_per_set, self.settings.seed)
            except (RowError, FileNotFoundError) as exc:
                raise pytest.UsageError(f"--data: {exc}") from exc
        return self._rows

    @property
    def datasets(self) -> list[str]:
        return list(self.rows)

    def validate_inputs(self) -> None:
        """Load rows and limits now; their errors are usage errors (exit 4), not test failures."""
        if self.usage_error is None:
            try:
                self.thresholds
            except pytest.UsageError as exc:
                self.usage_error = exc
        if self.usage_error is not None:
            raise self.usage_error

    def datasets_for_collection(self) -> list[str]:
        """Dataset names to parametrise over; a bad data file is kept and raised after collection."""
        try:
            return self.datasets
        except pytest.UsageError as exc:
            self.usage_error = exc
            return []

    @property
    def thresholds(self):
        """The limits: ``--thresholds`` with the ``--limitations`` overlay, validated against the declarations."""
        if self._thresholds is None:
            overlays = [self.settings.limitations] if self.settings.limitations else []
            try:
                self._thresholds = load_thresholds(
                    self.settings.thresholds, families={f.name: f.checks for f in declared()},
                    datasets=self.datasets, conditions=INVARIANCE_CONDITIONS, overlays=overlays)
            except ThresholdsError as exc:
                raise pytest.UsageError(str(exc)) from exc
        return self._thresholds

    def _harness_error(self, message: str) -> HarnessError:
        if message not in self.harness_errors:
            self.harness_errors.append(message)
        return HarnessError(message)

    def scorer(self, device: str):
        """The model on ``device``, loaded once per process; a failed load is remembered and not retried."""
        if device in self._load_errors:
            raise HarnessError(self._load_errors[device] + " (failed earlier in this run; not retried)")
        if device not in self._scorers:
            from laya_robustness.scoring import load_scorer

            s = self.settings
            try:
                self._scorers[device] = load_scorer(
                    s.scorer, s.model, device=device, precision=s.precision,
                    batch_size=s.batch_size, attn_implementation=s.attn_implementation)
                self.identities[device] = dict(getattr(self._scorers[device], "identity", {}))
            except Exception as exc:  # any failure to load is the harness's, not the gate's
                message = f"cannot load scorer {s.scorer!r} for model {s.model!r} on {device}: {exc}"
                self._load_errors[device] = message
                raise self._harness_error(message) from exc
        return self._scorers[device]

    # -- scoring --------------------------------------------------------------------------------

    def family_rows(self, family: str, dataset: str):
        """The rows ``family`` scores on one dataset (the source rows for orig)."""
        return build_variants(family, self.rows[dataset], self.settings.seed)

    def _score(self, family: str, dataset: str, device: str) -> None:
        key = (family, dataset, device)
        if key in self._scored:
            return
        scorer = self.scorer(device)
        rows = self.family_rows(family, dataset)
        try:
            scored = Scoring(scorer, self.settings.scoring_path, self.settings.temperatures).records(rows)
        except Exception as exc:  # a crash while scoring is the harness's, never a gate failure
            raise self._harness_error(
                f"scoring {family}/{dataset} on {device} with model {self.settings.model!r} failed: "
                f"{type(exc).__name__}: {exc}") from exc
        store = self.records.setdefault(device, {})
        for rec in scored:
            store[rec.row_id] = rec
        self._scored.add(key)

    def family_records(self, family: str, dataset: str, device: str) -> list[Record]:
        """The orig and ``family`` records of one dataset on one device (scored once per process)."""
        self._score(ORIG, dataset, device)
        self._score(family, dataset, device)
        return [r for r in self.records[device].values() if r.dataset == dataset and r.family in (ORIG, family)]

    # -- checks ---------------------------------------------------------------------------------

    def check_family(self, family: str, dataset: str, device: str) -> None:
        """Evaluate every limit of (family, dataset); fail, xfail (known limitation), skip or pass."""
        if family != ORIG and family not in self.families:
            pytest.skip(f"{family} is not in --families ({','.join(self.families)})")
        limits = self.thresholds.limits_for(family, dataset)
        records = self.family_records(family, dataset, device)
        if not any(r.family == family for r in records):
            pytest.skip(f"{family} builds no variant of any {dataset} row (none of its rules applies)")
        cell = summary_cell(summarize(records, seed=self.seed), family, dataset)
        if not limits:
            pytest.skip(f"scored; the limits set none for {family} on {dataset}")
        results = checks.evaluate_cell(family, dataset, cell, limits)
        self.results += [{**asdict(r), "device": device} for r in results]

        def known(check: str) -> str | None:
            limitation = self.thresholds.known_limitation(family, dataset, check)
            return limitation.reason if limitation else None

        verdict = cell_verdict(results, known)
        if verdict.outcome == FAIL:
            pytest.fail("\n\n".join(
                checks.failure_message(r, checks.worst_groups(records, family, dataset, r.check))
                for r in verdict.failures), pytrace=False)
        if verdict.outcome == XPASS:
            where = ", ".join(str(p.name) for p in (self.thresholds.path, *self.thresholds.overlays))
            fixed = [f"{r.check} now passes ({r.value:.4g} vs {r.limit:.4g}); remove the known limitation "
                     f"from {where}" for r in verdict.fixed]
            pytest.fail("[XPASS(strict)] known limitation no longer holds: " + "; ".join(fixed), pytrace=False)
        if verdict.outcome == XFAIL:
            pytest.xfail("known limitation: " + "; ".join(f"{r.check}: {why}" for r, why in verdict.expected))

    # -- invariance -----------------------------------------------------------------------------

    def invariance(self, condition: str, device: str) -> dict:
        """The stats of one invariance condition on ``device`` (references computed once per process)."""
        if device not in self._invariance:
            n = self.settings.invariance_rows
            rows = [r for name in self.datasets for r in self.rows[name][:n]]
            self._invariance[device] = InvarianceRun(self.scorer(device), rows, self.settings.batch_size,
                                                     self.settings.temperatures)
        try:
            stats = self._invariance[device].run(condition)
        except ConditionNotSupported as exc:
            pytest.skip(f"{condition} is not supported by this scorer: {exc}")
        except Exception as exc:
            raise self._harness_error(f"invariance condition {condition} on {device} with model "
                                      f"{self.settings.model!r} failed: {type(exc).__name__}: {exc}") from exc
        self.invariance_results.setdefault(device, {})[condition] = stats
        return stats

    def check_invariance(self, condition: str, device: str) -> None:
        """Evaluate the condition's limits (a bf16 condition gets the ``[invariance.bf16]`` flip budget)."""
        stats = self.invariance(condition, device)
        section = BF16_BUDGET if stats["precision"] == BF16 else condition
        limits = self.thresholds.invariance_limits(section)
        if not limits:
            pytest.skip(f"scored; the limits set none in [invariance.{section}]")
        results = checks.evaluate_invariance(condition, stats, limits)
        self.results += [{**asdict(r), "device": device} for r in results]
        failed = [r for r in results if not r.passed]
        if failed:
            worst = sorted(stats["per_row"], key=lambda e: (-e["abs_dlogit"], e["row_id"]))[:5]
            lines = [f"{e['row_id']}: answer {e['answer'][0]} -> {e['answer'][1]}, margin "
                     f"{e['margin'][0]:.4f} -> {e['margin'][1]:.4f}, |dp| {e['abs_dp']:.2e}, "
                     f"|dlogit| {e['abs_dlogit']:.2e}" for e in (stats["flipped"] or worst)]
            pytest.fail("\n\n".join(checks.failure_message(r, lines) for r in failed), pytrace=False)

    # -- all families ---------------------------------------------------------------------------

    def full_summary(self, device: str) -> dict:
        """The summary of every selected family on every dataset (scoring whatever is missing)."""
        for dataset in self.datasets:
            for family in self.families:
                self.family_records(family, dataset, device)
        return summarize(list(self.records[device].values()), seed=self.seed)

    # -- xdist ----------------------------------------------------------------------------------

    def worker_payload(self) -> str:
        return json.dumps({"records": self.records, "results": self.results, "harness": self.harness_errors,
                           "identities": self.identities, "invariance": self.invariance_results})

    def merge_payload(self, payload: str) -> None:
        """Add a worker's records (parsed into Records), results, errors, identities and invariance stats."""
        data = json.loads(payload)
        for device, recs in data["records"].items():
            store = self.records.setdefault(device, {})
            for row_id, rec in recs.items():
                store[row_id] = Record.parse(rec, f"worker record {row_id}")
        self.results += data["results"]
        self.harness_errors += [e for e in data["harness"] if e not in self.harness_errors]
        self.identities.update(data["identities"])
        for device, conditions in data["invariance"].items():
            self.invariance_results.setdefault(device, {}).update(conditions)

    def meta(self, device: str) -> dict:
        from laya_robustness.report_meta import run_meta

        return run_meta(self, device)
