"""The gate's per-process state: rows, scorers, records and check results, kept in ``config.stash``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from laya_robustness import checks
from laya_robustness.families import CORE_FAMILIES, DEFAULT_FAMILIES, family_names
from laya_robustness.invariance import BF16, BF16_BUDGET, CONDITION_NAMES, ConditionNotSupported, InvarianceRun
from laya_robustness.metrics import rounded
from laya_robustness.pytest_plugin import options
from laya_robustness.rows import RowError
from laya_robustness.run import ORIG, Scoring, family_rows, load_source_rows
from laya_robustness.summary import summarize, summary_cell
from laya_robustness.thresholds import ThresholdsError, load_thresholds

GPU_DEVICE = "cuda"
INVARIANCE_CONDITIONS = (*CONDITION_NAMES, BF16_BUDGET)


class HarnessError(RuntimeError):
    """The harness broke (model cannot load, bad data): not a gate failure."""


class RobustnessSession:
    """Loads what a gate run needs once per process and scores each (family, dataset, device) once."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.seed = int(options.get(config, "--seed"))
        self.rows_per_set = int(options.get(config, "--rows-per-set"))
        self.batch_size = int(options.get(config, "--batch-size"))
        self.precision = options.get(config, "--precision")
        self.scoring_path = options.get(config, "--scoring-path")
        if self.scoring_path not in ("batch", "predict"):
            raise pytest.UsageError(f"--scoring-path: {self.scoring_path!r} is not batch or predict")
        self.default_device = options.get(config, "--device")
        self.model_name = options.get(config, "--model")  # as the user gave it: recorded in meta
        local = options.get_path(config, "--model")
        self.model = str(local) if local.exists() else self.model_name  # else a hub id
        self.data = options.get_path(config, "--data")
        self.thresholds_path = options.get_path(config, "--thresholds")
        self.report_dir = options.get_path(config, "--report-dir")
        self.temperatures = options.parse_temperatures(options.get(config, "--temperatures"))
        self.attn_implementation = options.get(config, "--attn-implementation")
        self.scorer_spec = options.get(config, "--scorer")
        self.families = tuple(f.strip() for f in options.get(config, "--families").split(",") if f.strip())
        known = family_names()
        for f in self.families:
            if f not in known:
                raise pytest.UsageError(f"--families: unknown family {f!r} (known: {', '.join(known)})")
        self._rows = None
        self._thresholds = None
        self._scorers: dict[str, object] = {}
        self._scored: set[tuple[str, str, str]] = set()
        self.records: dict[str, dict[str, dict]] = {}  # device -> row_id -> record
        self.results: list[dict] = []  # check results of this process
        self.harness_errors: list[str] = []
        self.summaries: dict[str, dict] = {}  # device -> summary.json, once written
        self.identities: dict[str, dict] = {}  # device -> the loaded scorer's identity (also from workers)
        self.usage_error: pytest.UsageError | None = None
        self.invariance_rows = int(options.get(config, "--invariance-rows"))
        self.ece_floor_sims = int(options.get(config, "--ece-floor-sims"))
        self._invariance: dict[str, InvarianceRun] = {}
        self.invariance_results: dict[str, dict[str, dict]] = {}  # device -> condition -> stats

    # -- inputs ---------------------------------------------------------------------------------

    @property
    def rows(self) -> dict:
        """Sampled source rows by dataset; a bad data file is a usage error naming file, line and field."""
        if self._rows is None:
            try:
                self._rows = load_source_rows(self.data, self.rows_per_set, self.seed)
            except (RowError, FileNotFoundError) as exc:
                raise pytest.UsageError(f"--data: {exc}") from exc
        return self._rows

    @property
    def datasets(self) -> list[str]:
        return list(self.rows)

    def validate_inputs(self) -> None:
        """Load rows and thresholds now; their errors are usage errors (exit 4), not test failures."""
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
        if self._thresholds is None:
            try:
                self._thresholds = load_thresholds(
                    self.thresholds_path, families=(ORIG, *family_names()), datasets=self.datasets,
                    conditions=INVARIANCE_CONDITIONS)
            except ThresholdsError as exc:
                raise pytest.UsageError(str(exc)) from exc
        return self._thresholds

    def scorer(self, device: str):
        """The model on ``device``, loaded once per process; a failure is recorded as a harness error."""
        if device not in self._scorers:
            from laya_robustness.scoring import load_scorer

            try:
                self._scorers[device] = load_scorer(
                    self.scorer_spec, self.model, device=device, precision=self.precision,
                    batch_size=self.batch_size, attn_implementation=self.attn_implementation)
                self.identities[device] = dict(getattr(self._scorers[device], "identity", {}))
            except Exception as exc:  # any failure to load is the harness's, not the gate's
                message = f"cannot load scorer {self.scorer_spec!r} for model {self.model!r}: {exc}"
                self.harness_errors.append(message)
                raise HarnessError(message) from exc
        return self._scorers[device]

    # -- scoring --------------------------------------------------------------------------------

    def _score(self, family: str, dataset: str, device: str) -> None:
        key = (family, dataset, device)
        if key in self._scored:
            return
        scoring = Scoring(self.scorer(device), self.scoring_path, self.temperatures)
        store = self.records.setdefault(device, {})
        for rec in scoring.records(family_rows(family, self.rows[dataset], self.seed)):
            store[rec["row_id"]] = rec
        self._scored.add(key)

    def family_records(self, family: str, dataset: str, device: str) -> list[dict]:
        """The orig and ``family`` records of one dataset on one device (scored once per process)."""
        self._score(ORIG, dataset, device)
        self._score(family, dataset, device)
        return [r for r in self.records[device].values()
                if r["dataset"] == dataset and r["family"] in (ORIG, family)]

    # -- checks ---------------------------------------------------------------------------------

    def check_family(self, family: str, dataset: str, device: str) -> None:
        """Evaluate every limit of (family, dataset); fail, xfail (known limitation), skip or pass."""
        if family != ORIG and family not in self.families:
            pytest.skip(f"{family} is not in --families ({','.join(self.families)})")
        limits = self.thresholds.limits_for(family, dataset)
        records = self.family_records(family, dataset, device)
        if not any(r["family"] == family for r in records):
            pytest.skip(f"{family} builds no variant of any {dataset} row (none of its rules applies)")
        cell = summary_cell(summarize(records, seed=self.seed), family, dataset)
        if not limits:
            pytest.skip(f"scored; {self.thresholds_path.name} sets no limit for {family} on {dataset}")
        results = checks.evaluate_cell(family, dataset, cell, limits)
        self.results += [{**asdict(r), "device": device} for r in results]
        failures, expected, fixed = [], [], []
        for r in results:
            known = self.thresholds.known_limitation(family, dataset, r.check)
            if known and not r.passed:
                expected.append(f"{r.check}: {known.reason}")
            elif known:
                fixed.append(f"{r.check} now passes ({r.value:.4g} vs {r.limit:.4g}); "
                             f"remove the known limitation from {self.thresholds_path.name}")
            elif not r.passed:
                failures.append(checks.failure_message(r, checks.worst_groups(records, family, dataset, r.check)))
        if failures:
            pytest.fail("\n\n".join(failures), pytrace=False)
        if fixed:
            pytest.fail("[XPASS(strict)] known limitation no longer holds: " + "; ".join(fixed), pytrace=False)
        if expected:
            pytest.xfail("known limitation: " + "; ".join(expected))

    # -- invariance -----------------------------------------------------------------------------

    def invariance(self, condition: str, device: str) -> dict:
        """The stats of one invariance condition on ``device`` (references computed once per process)."""
        if device not in self._invariance:
            rows = [r for name in self.datasets for r in self.rows[name][: self.invariance_rows]]
            self._invariance[device] = InvarianceRun(self.scorer(device), rows, self.batch_size, self.temperatures)
        try:
            stats = self._invariance[device].run(condition)
        except ConditionNotSupported as exc:
            pytest.skip(f"{condition} is not supported by this scorer: {exc}")
        self.invariance_results.setdefault(device, {})[condition] = stats
        return stats

    def check_invariance(self, condition: str, device: str) -> None:
        """Evaluate the condition's limits (a bf16 condition gets the ``[invariance.bf16]`` flip budget)."""
        stats = self.invariance(condition, device)
        section = BF16_BUDGET if stats["precision"] == BF16 else condition
        limits = self.thresholds.invariance_limits(section)
        if not limits:
            pytest.skip(f"scored; {self.thresholds_path.name} sets no limit in [invariance.{section}]")
        results = checks.evaluate_invariance(condition, stats, limits)
        self.results += [{**asdict(r), "device": device} for r in results]
        failed = [r for r in results if not r.passed]
        if failed:
            worst = sorted(stats["per_row"], key=lambda e: (-e["abs_dlogit"], e["row_id"]))[:5]
            lines = [f"{e['row_id']}: answer {e['answer'][0]} -> {e['answer'][1]}, margin "
                     f"{e['margin'][0]:.4f} -> {e['margin'][1]:.4f}, |dp| {e['abs_dp']:.2e}, "
                     f"|dlogit| {e['abs_dlogit']:.2e}" for e in (stats["flipped"] or worst)]
            pytest.fail("\n\n".join(checks.failure_message(r, lines) for r in failed), pytrace=False)

    # -- snapshot -------------------------------------------------------------------------------

    def full_summary(self, device: str) -> dict:
        """The summary of every selected family on every dataset (scoring whatever is missing)."""
        for dataset in self.datasets:
            for family in self.families:
                self.family_records(family, dataset, device)
        return summarize(list(self.records[device].values()), seed=self.seed)

    def snapshot_name(self, device: str) -> str:
        """One snapshot per model and run configuration: ``<model>.<device>.n<rows>.s<seed>.<families>``."""
        model = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.model_name.strip("/"))
        named = {DEFAULT_FAMILIES: "all", CORE_FAMILIES: "core"}
        families = named.get(self.families, "+".join(self.families))
        return f"{model}.{'gpu' if device == GPU_DEVICE else 'cpu'}.n{self.rows_per_set}.s{self.seed}.{families}"

    def snapshot_view(self, device: str) -> dict:
        """What the snapshot holds: the run's identity and every metric rounded to 4 d.p. (no timings/versions)."""
        summary = self.full_summary(device)
        identity = dict(self.identities.get(device, {}))
        identity.pop("model", None)
        metrics = {k: v for k, v in summary.items() if k not in ("meta", "bootstrap")}
        return {"model": self.model_name, "identity": identity, "seed": self.seed,
                "rows_per_set": self.rows_per_set, "temperatures": self.temperatures,
                **rounded(metrics, 4)}

    # -- reports --------------------------------------------------------------------------------

    def worker_payload(self) -> str:
        return json.dumps({"records": self.records, "results": self.results, "harness": self.harness_errors,
                           "identities": self.identities, "invariance": self.invariance_results})

    def merge_payload(self, payload: str) -> None:
        data = json.loads(payload)
        for device, recs in data["records"].items():
            self.records.setdefault(device, {}).update(recs)
        self.results += data["results"]
        self.harness_errors += data["harness"]
        self.identities.update(data["identities"])
        for device, conditions in data["invariance"].items():
            self.invariance_results.setdefault(device, {}).update(conditions)

    def meta(self, device: str) -> dict:
        from laya_robustness.report_meta import run_meta

        return run_meta(self, device)

    def _device_report_dir(self, device: str) -> Path:
        """``--report-dir`` itself when one device ran, else its ``<device>/`` subfolder (created)."""
        several = len(set(self.records) | set(self.invariance_results)) > 1
        out = self.report_dir / device if several else self.report_dir
        out.mkdir(parents=True, exist_ok=True)
        return out

    def write_reports(self) -> list[Path]:
        """predictions.jsonl.gz and summary.json per device (under ``<device>/`` when several ran)."""
        from laya_robustness.predictions import write_predictions
        from laya_robustness.report_meta import invariance_meta

        written = []
        for device, conditions in sorted(self.invariance_results.items()):
            out = self._device_report_dir(device)
            path = out / "invariance.json"
            report = {"meta": invariance_meta(self, device), "conditions": dict(sorted(conditions.items()))}
            path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
            written.append(path)
        for device, recs in sorted(self.records.items()):
            out = self._device_report_dir(device)
            ordered = [recs[k] for k in sorted(recs)]
            write_predictions(out / "predictions.jsonl.gz", ordered)
            summary = summarize(ordered, meta=self.meta(device), seed=self.seed, ece_floor_sims=self.ece_floor_sims)
            self.summaries[device] = summary
            (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
            written += [out / "predictions.jsonl.gz", out / "summary.json"]
        return written
