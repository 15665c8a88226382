"""The gate's per-process state, kept in ``config.stash``, and the wiring between the run's parts.

The session holds what one pytest process loaded and scored (settings, rows, limits, scorers, records,
check results) and wires the library's parts together: the run's inputs, models, scoring loop and journal
(``laya_robustness.run``), the summary, the verdicts (``laya_robustness.gate``) and the pytest outcomes
(``outcomes``). Reports, the snapshot and the xdist payload have their own modules.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from laya_robustness.embedded import EMBEDDED_DUAL_MODEL, EMBEDDED_MODEL
from laya_robustness.families import get_family
from laya_robustness.gate.judgement import Judgement, evaluate_cell, evaluate_invariance
from laya_robustness.gate.limits import regression_limits, run_limits
from laya_robustness.gate.thresholds import ThresholdsError
from laya_robustness.gate.verdict import cell_verdict
from laya_robustness.loaders import LoadSettings
from laya_robustness.metrics.baseline import ALL
from laya_robustness.predictions import PredictionError, read_predictions
from laya_robustness.pytest_plugin import outcomes
from laya_robustness.pytest_plugin.options import AUTO_MODEL, read_settings, resolve, usage_error
from laya_robustness.pytest_plugin.progress import scoring_progress
from laya_robustness.records import ORIG, Record
from laya_robustness.rows import RowError
from laya_robustness.run.errors import HarnessError, stops_run
from laya_robustness.run.images import ImageStore, rows_with_pixels
from laya_robustness.run.inputs import InputSpec, caption_rows, source_rows, with_user_variants
from laya_robustness.run.invariance import (
    DUAL_CONDITIONS,
    DUAL_PREFIX,
    INVARIANCE_CONDITIONS,
    ConditionNotSupported,
    InvarianceRun,
    invariance_run,
    limits_section,
)
from laya_robustness.run.journal import JOURNAL_DIR, open_journal
from laya_robustness.run.lock import Lease, RunIdentity, claim, release
from laya_robustness.run.models import expected_weights, identity_key, is_dual_encoder, load_source_scorer
from laya_robustness.run.scoring import Scoring, executor_for, score_journaled, scoring_chunks
from laya_robustness.run.variants import VariantImages, family_variants
from laya_robustness.scoring.base import answers_in_text
from laya_robustness.scoring.factory import SERVED_SCORER
from laya_robustness.scoring.malloc import give_back_freed_memory
from laya_robustness.summary import CellCache, family_cell, summarize

GPU_DEVICE = "cuda"
#: The key of the controller's run identity in an xdist worker's ``workerinput``.
RUN_KEY = "laya_run"


def reported_condition(condition: str, source: str) -> str:
    """The name an invariance condition is reported under: its own for the question model, ``dual:<condition>``
    for the dual encoder (in invariance.json and checks.json alike)."""
    return condition if source == "rows" else f"{DUAL_PREFIX}{condition}"


class RobustnessSession:
    """Loads what a gate run needs once per process and scores each (family, dataset, device) once."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = read_settings(config)
        shared = getattr(config, "workerinput", {}).get(RUN_KEY)  # an xdist worker: its controller's run
        self.run = RunIdentity.parse(shared) if shared else RunIdentity.this_process()
        self._lease: Lease | None = None
        self.lock_notes: list[str] = []  # what claiming the report folder's lock did (a stale lock taken over)
        self.start_error: tuple[int, str] | None = None  # (exit status, why) when the run stopped before any work
        self._rows = None  # dataset -> source rows, their images waiting in self.images
        self.images = ImageStore(self.settings.image_cache_mb << 20)  # the decoded images kept between uses
        self._caption_rows = None
        self._thresholds = None
        self._scorers: dict[str, object] = {}
        self._load_errors: dict[str, tuple[str, bool]] = {}  # device -> why its scorer could not load, fatal or not
        self.scored: set[tuple[str, str, str]] = set()  # (family, dataset, device) scored in this process
        self.records: dict[str, dict[str, Record]] = {}  # device -> row_id -> record
        self._cell_records: dict[tuple, list[Record]] = {}  # (device, family, dataset) -> its records, once scored
        self.results: list[dict] = []  # check results of this process
        self.judged: set[tuple[str, str, str]] = set()  # (family, dataset, device) whose test reached a verdict
        self.scopes: dict = {}  # device -> run.scope.Scope of its report, decided when the run ends
        self.harness_errors: list[str] = []
        self.summaries: dict[str, dict] = {}  # device -> summary.json, once written
        self.identities: dict[str, dict] = {}  # device -> the loaded scorer's identity (also from workers)
        self.worker_stats: dict[str, dict] = {}  # identity key -> the xdist workers' scorer counters, summed
        self.usage_error: pytest.UsageError | None = None
        self._invariance: dict[str, InvarianceRun] = {}
        self.cluster = None  # --executor ray: the Ray cluster (run.executors.ray_cluster.Cluster), once connected
        self._pools: dict[str, object] = {}  # device -> its RayActorPool (--executor ray)
        self._journals: dict[str, object] = {}
        self._n_interval_checks: int | None = None
        self._baseline: list | None = None
        self._summary_cache: dict[str, tuple] = {}  # device -> (records key, summary): see records_summary
        self.cells = CellCache()  # the summary cells computed so far, shared by the family tests and the summary
        self.invariance_results: dict[str, dict[str, dict]] = {}  # device -> condition -> stats
        self.written: list = []
        self.incomplete_reason: str | None = None  # set when the run ends
        self.kept_previous_report = False
        self.kept_freed_memory = False  # whether malloc keeps freed memory (--keep-freed-memory, glibc only)
        # under xdist: the workers' summary snapshots ({device, name, path}), compared on the controller
        self.deferred_snapshots: list[dict] = []
        self.snapshot_outcomes: list = []  # snapshot.SnapshotOutcome of each, once compared

    # settings the rest of the plugin reads by name
    seed = property(lambda self: self.settings.seed)
    rows_per_set = property(lambda self: self.settings.rows_per_set)
    families = property(lambda self: self.settings.families)
    default_device = property(lambda self: self.settings.device)
    report_dir = property(lambda self: self.settings.report_dir)

    @property
    def model_name(self) -> str:
        """The model as the user named it (recorded in meta and the snapshot name); a served model left to the
        endpoint (``--model`` omitted) by the id the endpoint gave."""
        if self.settings.model_name != AUTO_MODEL or not self.served:
            return self.settings.model_name
        return self.identities.get(identity_key(self.default_device, "rows"), {}).get("model", AUTO_MODEL)

    @property
    def served(self) -> bool:
        """Whether the model is behind a server (``--scorer openai``): it answers in text over requests."""
        return self.settings.scorer == SERVED_SCORER

    # -- models -------------------------------------------------------------------------------------

    @property
    def model_is_dual(self) -> bool:
        """Whether ``--model`` is a dual encoder (CLIP / SigLIP): it answers no questions, it is probed."""
        return self.settings.scorer == "hf" and is_dual_encoder(self.settings.model)

    @property
    def dual_model(self) -> str | None:
        """The dual encoder the caption families probe (see ``--dual-model``), or None."""
        chosen = self.settings.dual_model
        if chosen != "auto":
            return chosen
        if self.served:  # the weights behind a server are unknown: no dual encoder goes with them
            return None
        if self.model_is_dual:
            return self.settings.model
        if Path(self.settings.model).resolve() == resolve(self.config, EMBEDDED_MODEL).resolve():
            return str(resolve(self.config, EMBEDDED_DUAL_MODEL))
        return None

    @staticmethod
    def served_without_dual(what: str) -> str:
        """Why ``what`` (a caption family, the dual encoder's conditions) does not run with a served model alone."""
        return (f"{what} probes a dual encoder (CLIP / SigLIP caption similarities), which a chat model behind a "
                "server does not give: it answers questions only (pass --dual-model to probe one)")

    def skip_reason(self, family: str) -> str | None:
        """Why a family cannot run with these models, or None."""
        source = get_family(family).source
        if source == "rows" and self.model_is_dual:
            return (f"{self.settings.model_name} is a dual encoder: it answers no questions, so {family} does not "
                    "apply (the lgip families probe it)")
        if source == "captions" and self.dual_model is None and self.served:
            return self.served_without_dual(family)
        if source == "captions" and self.dual_model is None:
            return (f"{family} probes a dual encoder and none is given: pass a CLIP / SigLIP --model, or "
                    "--dual-model <hub id or directory>")
        return None

    def scorer(self, device: str, source: str = "rows"):
        """The model scoring ``source`` rows on ``device`` (the dual encoder for captions), loaded once per
        process; a failed load is remembered and not retried. Its identity is kept under ``identity_key``."""
        key = identity_key(device, source)
        if key in self._load_errors:
            message, fatal = self._load_errors[key]
            raise HarnessError(message + " (failed earlier in this run; not retried)", stops_run=fatal)
        if key not in self._scorers:
            model = self.dual_model if source == "captions" else self.settings.model
            try:
                scorer = load_source_scorer(self.settings, model, device,
                                            dual=source == "captions" or self.model_is_dual)
            except Exception as exc:  # any failure to load is the harness's, not the gate's
                named = repr(model) if model is not None else "(the endpoint's only model)"
                message = f"cannot load scorer {self.settings.scorer!r} for model {named} on {device}: {exc}"
                self._load_errors[key] = (message, stops_run(exc))
                raise self.harness_error(message, stops_run(exc)) from exc
            self._scorers[key] = scorer
            self.identities[key] = dict(getattr(scorer, "identity", {}))
        return self._scorers[key]

    def scorer_stats(self) -> dict[str, dict]:
        """The counters (``stats``) of this process's scorers by identity key, plus what the xdist workers sent."""
        out = {key: dict(counts) for key, counts in self.worker_stats.items()}
        for key, scorer in self._scorers.items():
            for name, value in getattr(scorer, "stats", {}).items():
                out.setdefault(key, {})[name] = out.get(key, {}).get(name, 0) + value
        return out

    def endpoint_unreachable(self) -> str | None:
        """Why a served model's endpoint cannot be reached (its scorer connects here, once), or None."""
        try:
            self.scorer(self.default_device)
        except HarnessError as exc:
            return str(exc) if exc.stops_run else None
        return None

    def served_capability(self) -> str:
        """What the terminal header says of a served model: which model at which endpoint, and whether its answers
        carry probabilities (decided once, when it connects), or why it cannot be reached."""
        where = f"served model at {self.settings.endpoint}"
        try:
            scorer = self.scorer(self.default_device)
        except HarnessError as exc:
            return f"{where}: {exc}"
        if scorer.probabilities:
            return f"{where}: {scorer.model_id}, option probabilities from the top_logprobs of the first answer token"
        return (f"{where}: {scorer.model_id}, generation-only (the server returns no top_logprobs): answers are "
                "extracted from the text; ECE, flip floors and probability deltas are not available")

    # -- executors ------------------------------------------------------------------------------

    @property
    def uses_ray(self) -> bool:
        return self.settings.executor == "ray"

    def connect_cluster(self) -> None:
        """--executor ray: connect to the cluster before any test runs (an unreachable one: ClusterUnreachable)."""
        if self.uses_ray and self.cluster is None:
            from laya_robustness.run.executors.ray_cluster import connect

            self.cluster = connect(self.settings.ray_address)

    def executor(self, device: str, source: str = "rows"):
        """What scores ``source`` rows on ``device``: this process (``LocalExecutor``) or the run's Ray actors."""
        if not self.uses_ray:
            s = self.settings
            return executor_for(Scoring(self.scorer(device, source), s.scoring_path, s.temperatures))
        pool = self._pool(device, source)
        return pool.executor(source)

    def identity(self, device: str, source: str = "rows") -> dict:
        """The identity of the scorer of ``source`` rows on ``device``, wherever it is loaded."""
        if self.uses_ray:
            self._pool(device, source)
            return dict(self.identities[identity_key(device, source)])
        return dict(getattr(self.scorer(device, source), "identity", {}))

    def _pool(self, device: str, source: str):
        """The Ray actors scoring on ``device`` (started once), with ``source``'s scorer loaded on each; a failure
        to start them or to load it is remembered and not retried (as a scorer's failed load)."""
        key = identity_key(device, source)
        if key in self._load_errors:
            message, fatal = self._load_errors[key]
            raise HarnessError(message + " (failed earlier in this run; not retried)", stops_run=fatal)
        model = self.dual_model if source == "captions" else self.settings.model
        try:
            if device not in self._pools:
                self._pools[device] = self._start_pool(device)
            if key not in self.identities:
                self.identities[key] = self._pools[device].prepare(source)
        except HarnessError as exc:
            message = f"cannot load scorer {self.settings.scorer!r} for model {model!r} on {device}: {exc}"
            self._load_errors[key] = (message, stops_run(exc))
            raise self.harness_error(message, stops_run(exc)) from exc
        return self._pools[device]

    def _start_pool(self, device: str):
        """Start the Ray actors of ``device``: each can load the question model and the dual encoder."""
        from functools import partial

        from laya_robustness.run.executors.ray_actor import actor_device, load_scoring
        from laya_robustness.run.executors.ray_pool import RayActorPool

        self.connect_cluster()
        s, on = self.settings, actor_device(device)
        loads = {"rows": partial(load_scoring, s, s.model, on, self.model_is_dual)}
        expected = {"rows": expected_weights(s.model, "hf" if self.model_is_dual else s.scorer)}
        if self.dual_model is not None:
            loads["captions"] = partial(load_scoring, s, self.dual_model, on, True)
            expected["captions"] = expected_weights(self.dual_model, "hf")
        gpus = device.startswith("cuda")
        return RayActorPool(loads, on, self.cluster.actor_count(s.ray_actors, gpus), gpus,
                            f"the Ray actors at {s.ray_address}", expected)

    def executor_meta(self, device: str) -> dict | None:
        """Where the scoring of ``device`` ran, for the reports' meta: None when in this process (the executor
        is local); for Ray the address, the actors, their nodes and devices, and how many were replaced."""
        if not self.uses_ray:
            return None
        pool = self._pools.get(device)
        return {"name": "ray", "address": self.settings.ray_address, **(pool.meta() if pool else {"actors": 0})}

    def close_executors(self) -> None:
        """Stop the run's Ray actors and disconnect from the cluster (nothing to do for a local run)."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def harness_error(self, message: str, stop: bool = False) -> HarnessError:
        """A harness error (exit 3) remembered for the terminal summary; ``stop``: the run cannot go on."""
        if message not in self.harness_errors:
            self.harness_errors.append(message)
        return HarnessError(message, stops_run=stop)

    # -- the report folder ----------------------------------------------------------------------

    def claim_report_dir(self) -> None:
        """Hold (or check that this run still holds) the lock of ``--report-dir`` (``laya_robustness.run.lock``),
        renewing its lease while the process runs. Raises ``ReportDirInUse`` or ``OSError``."""
        def say_waiting(holder) -> None:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                who = holder.describe() if holder else "a run whose lock cannot be read"
                reporter.write_line(f"laya-robustness: {self.report_dir} is in use by another run ({who}); waiting "
                                    f"up to {self.settings.report_dir_wait} s for it to end")

        held = claim(self.report_dir, self.run, wait_s=self.settings.report_dir_wait, on_wait=say_waiting)
        if held.waited_for is not None:
            self.lock_notes.append(f"waited for the run that held {self.report_dir} to end "
                                   f"({held.waited_for.describe()})")
        if held.previous is not None:
            self.lock_notes.append(f"took over the lock of {self.report_dir} from a run that is gone "
                                   f"({held.previous.describe()})")
        if self._lease is None:
            self._lease = Lease(self.report_dir, self.run)

    def release_report_dir(self) -> None:
        """Stop renewing the lock; the run's main process (not an xdist worker) also removes it."""
        if self._lease is not None:
            self._lease.stop()
        if not hasattr(self.config, "workerinput"):
            release(self.report_dir, self.run)

    # -- inputs ---------------------------------------------------------------------------------

    @property
    def inputs(self) -> InputSpec:
        """Where the run's rows come from and how they are read (the options)."""
        s = self.settings
        load = LoadSettings(s.data_map, s.max_image_pixels, s.allow_outside_data, s.max_image_side)
        captions = s.captions if self._probes_captions() else None
        return InputSpec(s.data, s.rows_per_set, s.seed, load, s.rephrasings, s.translations, captions, s.paraphrases)

    @property
    def rows(self) -> dict:
        """Sampled source rows by dataset, their images waiting in ``images`` (``rows_with_pixels`` gives them
        their pixels); a bad data file is a usage error naming file, line and field."""
        if self._rows is None:
            spec = self.inputs
            try:
                rows = source_rows(spec, self.images)
            except (RowError, FileNotFoundError) as exc:
                raise usage_error("--data", exc) from exc
            try:
                self._rows = with_user_variants(rows, spec)
            except (RowError, FileNotFoundError) as exc:
                bad = str(getattr(exc, "path", None) or getattr(exc, "filename", None))  # the file it names
                translations = spec.rephrasings is None or bad == str(spec.translations)
                flag = "--translations" if translations else "--rephrasings"
                raise usage_error(flag, exc) from exc
        return self._rows

    @property
    def datasets(self) -> list[str]:
        return list(self.rows)

    def _probes_captions(self) -> bool:
        selected = [get_family(f) for f in self.families]
        return self.dual_model is not None and any(f.source == "captions" for f in selected)

    @property
    def caption_rows(self) -> dict:
        """Caption rows by dataset (when a caption family is selected and a dual encoder is there), else {}."""
        if self._caption_rows is None:
            try:
                self._caption_rows = caption_rows(self.inputs)
            except (RowError, FileNotFoundError) as exc:
                raise usage_error("--captions", exc) from exc
        return self._caption_rows

    def rows_of(self, family: str) -> dict:
        """The source rows a family is built from, by dataset (question rows or caption rows)."""
        return self.caption_rows if get_family(family).source == "captions" else self.rows

    def caption_sets_for_collection(self) -> list[str]:
        """Caption dataset names to parametrise over; a bad caption file is kept and raised after collection."""
        try:
            return list(self.caption_rows)
        except pytest.UsageError as exc:
            self.usage_error = exc
            return []

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
            try:
                self._thresholds = run_limits(self.settings.thresholds, datasets=[*self.datasets, *self.caption_rows],
                                              conditions=INVARIANCE_CONDITIONS, limitations=self.settings.limitations)
            except ThresholdsError as exc:
                raise pytest.UsageError(f"{exc}\n  edit that key of the file (the checks and their ranges: "
                                        "docs/verdicts.md; the fixes: docs/errors.md)") from exc
        return self._thresholds

    # -- scoring --------------------------------------------------------------------------------

    def _source_of(self, family: str, dataset: str) -> str:
        """Which rows ``dataset`` belongs to (orig is scored on either kind)."""
        if family == ORIG:
            return "captions" if dataset in self.caption_rows else "rows"
        return get_family(family).source

    def family_rows(self, family: str, dataset: str):
        """The rows ``family`` scores on one dataset (the source rows for orig), their images waiting where the
        family allows (``run.variants``)."""
        source = self.caption_rows if self._source_of(family, dataset) == "captions" else self.rows
        return family_variants(family, source[dataset], self.settings.seed, self.images)

    def journal(self, device: str, source: str):
        """The journal this process appends ``source`` records of ``device`` to (``laya_robustness.run.journal``)."""
        key = identity_key(device, source)
        if key not in self._journals:
            identity, s = self.identity(device, source), self.settings
            settings = {"scorer": s.scorer, "precision": s.precision, "scoring_path": s.scoring_path,
                        "batch_size": s.batch_size, "temperatures": s.temperatures, "source": source,
                        "attn_implementation": s.attn_implementation, "pixel_cache_mb": s.pixel_cache_mb}
            worker = getattr(self.config, "workerinput", {}).get("workerid")
            self._journals[key] = open_journal(s.journal or self.report_dir / JOURNAL_DIR, key, worker,
                                               identity, settings, resume=s.resume, run=self.run.token)
        return self._journals[key]

    def _score(self, family: str, dataset: str, device: str) -> None:
        """Score one family on one dataset, chunk by chunk, journaling each chunk as soon as it is scored;
        with --resume the rows an earlier run journaled are reused and only the others scored."""
        key = (family, dataset, device)
        if key in self.scored:
            return
        source = self._source_of(family, dataset)
        executor, journal = self.executor(device, source), self.journal(device, source)
        scorer = None if self.uses_ray else self.scorer(device, source)  # on Ray, the actors hold the scorers
        rows = self.family_rows(family, dataset)
        progress = scoring_progress(self.config, device, f"{family}/{dataset}", len(rows))
        chunks = scoring_chunks(rows, self.settings.scoring_path, self.settings.batch_size,
                                per_row=answers_in_text(scorer))
        variant_images = VariantImages(rows, self.images, executor if self.uses_ray else scorer)
        let_go = 0  # decoded bytes of the images let go since freed memory was last given back

        def chunk_done(done_rows: list) -> None:
            nonlocal let_go
            let_go += variant_images.done(done_rows)
            if self.kept_freed_memory and let_go > self.images.max_bytes // 2:  # see scoring.malloc
                give_back_freed_memory()
                let_go = 0

        try:
            cell = score_journaled(executor, journal, rows, chunks, progress.update, chunk_done)
        except Exception as exc:  # a crash while scoring is the harness's, never a gate failure
            raise self.harness_error(f"scoring {family}/{dataset} on {device} with model {self.settings.model!r} "
                                     f"failed: {type(exc).__name__}: {exc}", stops_run(exc)) from exc
        finally:
            progress.close()
            variant_images.all_done()
            if self.kept_freed_memory:
                give_back_freed_memory()
        store = self.records.setdefault(device, {})
        for rec in cell:
            store[rec.row_id] = rec
        self._cell_records[(device, family, dataset)] = cell
        self.scored.add(key)

    def family_records(self, family: str, dataset: str, device: str) -> list[Record]:
        """The orig and ``family`` records of one dataset on one device (scored once per process)."""
        self._score(ORIG, dataset, device)
        self._score(family, dataset, device)
        orig = self.records_of(device, ORIG, dataset)
        return list(orig) if family == ORIG else [*orig, *self.records_of(device, family, dataset)]

    def records_of(self, device: str, family: str, dataset: str) -> list[Record]:
        """The records of one cell: as _score stored them, else (records merged from xdist workers) found."""
        key = (device, family, dataset)
        if key not in self._cell_records:
            self._cell_records[key] = [r for r in self.records.get(device, {}).values()
                                       if r.family == family and r.dataset == dataset]
        return self._cell_records[key]

    def forget_cell(self, device: str, family: str, dataset: str) -> None:
        """Drop the cached records of a cell (records merged from a worker change it)."""
        self._cell_records.pop((device, family, dataset), None)

    # -- checks ---------------------------------------------------------------------------------

    def check_family(self, family: str, dataset: str, device: str) -> None:
        """Evaluate every limit of (family, dataset); fail, xfail (known limitation), skip or pass."""
        if family != ORIG and family not in self.families:
            pytest.skip(f"{family} is not in --families ({','.join(self.families)})")
        reason = self.skip_reason(family)
        if reason:
            pytest.skip(reason)
        limits = self.thresholds.limits_for(family, dataset)
        records = self.family_records(family, dataset, device)
        if not any(r.family == family for r in records):
            self.judged.add((family, dataset, device))  # nothing to judge
            pytest.skip(f"{family} builds no variant of any {dataset} row: {get_family(family).when_empty}")
        cell = family_cell(records, family, dataset, seed=self.seed, cache=self.cells)
        if not limits:
            self.judged.add((family, dataset, device))
            pytest.skip(f"scored; the limits set none for {family} on {dataset}")
        results = evaluate_cell(family, dataset, cell, limits, self.judgement(family, dataset))
        self.judged.add((family, dataset, device))
        have = len(self.rows_of(family).get(dataset, ())) if family != ORIG else len(self.rows.get(dataset, ()))

        def known(check: str) -> str | None:
            limitation = self.thresholds.known_limitation(family, dataset, check)
            return limitation.reason if limitation else None

        self.results += [{**asdict(r), "device": device, "n_rows_have": have, "known": known(r.check) is not None}
                         for r in results]
        outcomes.cell_outcome(cell_verdict(results, known), records, family, dataset,
                              (self.thresholds.path, *self.thresholds.overlays))

    def judgement(self, family: str, dataset: str) -> Judgement:
        """How the limits of one cell are judged (their judge, and alpha / m of the whole run)."""
        t = self.thresholds
        return Judgement(lambda check: t.judge_for(family, dataset, check), t.gate.alpha_each(self.n_interval_checks))

    # -- invariance -----------------------------------------------------------------------------

    def invariance(self, condition: str, device: str, source: str = "rows") -> dict:
        """The stats of one invariance condition of the ``source`` model on ``device`` (references computed
        once per process). The dual encoder is checked on caption rows, under the conditions it can take."""
        if source == "rows" and self.model_is_dual:
            pytest.skip("--model is a dual encoder: its invariance conditions run in test_dual_invariance")
        if source == "captions" and self.dual_model is None:
            pytest.skip(self.served_without_dual("test_dual_invariance") if self.served else
                        "no dual encoder to check: pass a CLIP / SigLIP --model, or --dual-model")
        if source == "captions" and condition not in DUAL_CONDITIONS:
            pytest.skip(f"{condition} needs rows with several or no images, which a dual encoder does not score")
        key = identity_key(device, source)
        if key not in self._invariance:
            n = self.settings.invariance_rows
            rows_by_dataset = self.caption_rows if source == "captions" else self.rows
            rows = rows_with_pixels([r for name in rows_by_dataset for r in rows_by_dataset[name][:n]])
            if not rows:
                what = "caption rows (no lgip family is selected)" if source == "captions" else "rows"
                pytest.skip(f"no {what} to score {condition} on")
            batch_size, temperatures = self.settings.batch_size, self.settings.temperatures
            if self.uses_ray:  # on the pool's first actor, where the run's rows are scored
                self._invariance[key] = self._pool(device, source).invariance(source, rows, batch_size, temperatures)
            else:
                self._invariance[key] = invariance_run(self.scorer(device, source), rows, batch_size, temperatures)
        try:
            stats = self._invariance[key].run(condition)
        except ConditionNotSupported as exc:
            pytest.skip(f"{condition} is not supported by this scorer: {exc}")
        except Exception as exc:
            raise self.harness_error(f"invariance condition {condition} on {device} with model "
                                     f"{self.settings.model!r} failed: {type(exc).__name__}: {exc}") from exc
        self.invariance_results.setdefault(device, {})[reported_condition(condition, source)] = stats
        return stats

    def check_invariance(self, condition: str, device: str, source: str = "rows") -> None:
        """Evaluate the condition's limits (a bf16 condition gets the ``[invariance.bf16]`` flip budget)."""
        stats = self.invariance(condition, device, source)
        section = limits_section(condition, stats["precision"])
        limits = self.thresholds.invariance_limits(section)
        if not limits:
            pytest.skip(f"scored; the limits set none in [invariance.{section}]")
        results = evaluate_invariance(condition, stats, limits)
        results = [replace(r, dataset=reported_condition(condition, source)) for r in results]
        self.results += [{**asdict(r), "device": device} for r in results]
        outcomes.invariance_outcome(results, stats)

    # -- all families ---------------------------------------------------------------------------

    def run_cells(self) -> list[tuple[str, str]]:
        """Every (family, dataset) cell the run's family tests evaluate: orig on the question sets, and each
        selected family that can run on every dataset of its source."""
        cells = [] if self.model_is_dual else [(ORIG, d) for d in self.datasets]
        for family in self.families:
            if not self.skip_reason(family):
                cells += [(family, d) for d in self.rows_of(family)]
        return cells

    @property
    def n_interval_checks(self) -> int:
        """m: how many limits of the whole run are judged on their interval (each gets alpha / m), the
        regression checks against a --baseline included."""
        if self._n_interval_checks is None:
            t = self.thresholds
            m = sum(t.judge_for(f, d, check) == "interval" for f, d in self.run_cells() for check in t.limits_for(f, d))
            if self.settings.baseline is not None and t.gate.judge == "interval":
                m += sum(len(regression_limits(t.gate, f)) for f in {f for f, _ in self.run_cells()})
            self._n_interval_checks = m
        return self._n_interval_checks

    @property
    def baseline_records(self) -> list:
        """The records of --baseline (a bad file is a usage error naming it)."""
        if self._baseline is None:
            try:
                self._baseline = read_predictions(self.settings.baseline)
            except (PredictionError, OSError) as exc:
                raise usage_error("--baseline", exc) from exc
        return self._baseline

    def check_regression(self, family: str, device: str) -> None:
        """The family, over all its datasets, against the --baseline: its regression limits and the McNemar tests."""
        if self.settings.baseline is None:
            pytest.skip("no --baseline to compare with")
        if family != ORIG and family not in self.families:
            pytest.skip(f"{family} is not in --families ({','.join(self.families)})")
        reason = None if family == ORIG else self.skip_reason(family)
        if reason:
            pytest.skip(reason)
        datasets = [d for f, d in self.run_cells() if f == family]
        # the family's records with the orig rows they pair with (a block cell such as lgip's needs them)
        records = [r for d in datasets for r in self.family_records(family, d, device)]
        summary = summarize(records, seed=self.seed, baseline=self.baseline_records, cache=self.cells)
        cell = summary.get("baseline", {}).get(family, {}).get(ALL)
        if not cell:
            pytest.skip(f"the baseline has none of this run's {family} rows")
        limits = regression_limits(self.thresholds.gate, family, cell)
        if not limits and not cell["n_groups"]:
            pytest.skip(f"no {family} row has a right answer (a caption has none): its accuracy cannot regress")
        if not limits:
            pytest.skip(f"the limits set no [gate] regression limit that applies to {family}")
        judge = Judgement(lambda check: self.thresholds.gate.judge, self.thresholds.gate.alpha_each(self.n_interval_checks))
        results = evaluate_cell(family, ALL, cell, limits, judge)
        self.results += [{**asdict(r), "device": device, "n_rows_have": None, "known": False} for r in results]
        outcomes.regression_outcome(results, cell)

    def full_summary(self, device: str) -> dict:
        """The summary of every selected family that can run, on every dataset of its source (scoring
        whatever is missing), with orig on the caption sets the lgip families pair with."""
        for family, dataset in self.run_cells():
            self.family_records(family, dataset, device)
        return self.records_summary(device)

    def records_summary(self, device: str) -> dict:
        """``summarize`` of every record of ``device`` held now (no meta, no floor, no baseline), computed
        once per set of records: the snapshot and the reports share it."""
        records = self.records.get(device, {})
        key = (device, len(records), hash(tuple(sorted(records))))
        if self._summary_cache.get(device, (None,))[0] != key:
            self._summary_cache[device] = (key, summarize(list(records.values()), seed=self.seed, cache=self.cells))
        return self._summary_cache[device][1]

    def defer_snapshot(self, device: str, name: str, path) -> None:
        """A worker's summary snapshot, to be compared on the controller once every worker's records are in."""
        self.deferred_snapshots.append({"device": device, "name": name, "path": str(path)})

