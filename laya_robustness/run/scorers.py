"""A run's scorers (``ScorerPool``): the question model and the dual encoder its caption families probe, loaded once
per device in this process or held where its executor scores (``--executor``, ``run.executors``: a pool of Ray actors
per device), with their identities and counters. Which models they are is ``run.models``."""

from __future__ import annotations

import logging

from laya_robustness.run.errors import HarnessError, stops_run
from laya_robustness.run.executors.registry import make_executor
from laya_robustness.run.models import RunModels
from laya_robustness.run.pipeline.scorer_sources import identity_key, load_source_scorer
from laya_robustness.scoring.base import capabilities


logger = logging.getLogger("laya_robustness")


class ScorerPool:
    """A run's scorers: the question model and the dual encoder its caption families probe (``models``, the run's
    ``run.models.RunModels``), each loaded once per device in this process, or held where ``run_executor`` scores
    (``--executor``: a pool of Ray actors per device), to which the scoring is delegated. A failed load is
    remembered and not retried; its message goes to ``errors`` (the run's harness errors). The identities of the
    scorers loaded (here, by the executor, or sent by xdist workers) are ``identities``."""

    def __init__(self, settings, models: RunModels, errors: list[str]):
        self.settings, self.models, self.errors = settings, models, errors
        self._scorers: dict[str, object] = {}
        self._load_errors: dict[str, tuple[str, bool]] = {}  # identity key -> why its scorer could not load, fatal?
        self._identities: dict[str, dict] = {}  # identity key -> a scorer's identity, loaded here or in a worker
        self.worker_stats: dict[str, dict] = {}  # identity key -> the xdist workers' scorer counters, summed
        self.run_executor = make_executor(settings.executor, self)  # where the rows are scored (--executor)

    @property
    def identities(self) -> dict[str, dict]:
        """Identity key -> the identity of each scorer loaded: here, by xdist workers (``add_identities``), or
        where the executor holds them (``Executor.identities``)."""
        return {**self._identities, **self.run_executor.identities()}

    def add_identities(self, identities: dict[str, dict]) -> None:
        """The identities of the scorers an xdist worker loaded."""
        self._identities.update(identities)

    @property
    def model_name(self) -> str:
        """The model as the user named it (recorded in meta and the snapshot name); a served model left to the
        endpoint (``--model`` omitted) by the id the endpoint gave."""
        from laya_robustness.run.inputs.options import AUTO_MODEL

        if self.models.name != AUTO_MODEL or not self.models.served:
            return self.models.name
        return self.identities.get(identity_key(self.settings.device, "rows"), {}).get("model", AUTO_MODEL)

    # -- scorers in this process --------------------------------------------------------------------

    def harness_error(self, message: str, stop: bool = False) -> HarnessError:
        """A harness error (exit 3) remembered in ``errors``; ``stop``: the run cannot go on."""
        if message not in self.errors:
            self.errors.append(message)
        return HarnessError(message, stops_run=stop)

    def _remembered(self, key: str) -> None:
        if key in self._load_errors:
            message, fatal = self._load_errors[key]
            raise HarnessError(message + " (failed earlier in this run; not retried)", stops_run=fatal)

    def _load_failed(self, key: str, source: str, device: str, exc: Exception) -> HarnessError:
        """The question model that cannot load stops the run (every test of the device would fail with the same
        error); a dual encoder that cannot load fails the caption tests only, unless its error says it stops."""
        model = self.models.source_model(source)
        named = repr(model) if model is not None else "(the endpoint's only model)"
        message = f"cannot load scorer {self.settings.scorer!r} for model {named} on {device}: {exc}"
        stop = source == "rows" or stops_run(exc)
        self._load_errors[key] = (message, stop)
        return self.harness_error(message, stop)

    def _load(self, device: str, source: str):
        return load_source_scorer(self.settings, self.models.source_model(source), device,
                                  dual=source == "captions" or self.models.is_dual)

    def scorer(self, device: str, source: str = "rows"):
        """The model scoring ``source`` rows on ``device`` (the dual encoder for captions), loaded once; a failed
        load is remembered and not retried. Its identity is kept under ``identity_key``."""
        key = identity_key(device, source)
        self._remembered(key)
        if key not in self._scorers:
            try:
                scorer = self._load(device, source)
            except Exception as exc:  # any failure to load is the harness's, not the gate's
                raise self._load_failed(key, source, device, exc) from exc
            self._scorers[key] = scorer
            self._identities[key] = dict(getattr(scorer, "identity", {}))
            if source == "rows" and self.models.in_memory:
                self._say_attention(self._identities[key].get("attn_implementation"))
        return self._scorers[key]

    def _say_attention(self, kernel: str | None) -> None:
        """One line when a model in memory runs another attention kernel than the gate's (``--attn-implementation``):
        its numbers move in their last digits, and its snapshot is another configuration's."""
        wanted = self.settings.attn_implementation
        if kernel and kernel != wanted:
            logger.warning("robustness gate: the model in memory runs attention %r, not the gate's %r: its numbers "
                           "differ from the checkpoint's under %r in their last digits (about the 6th decimal), and "
                           "a snapshot of it is another configuration's (attn_implementation=%r names it)", kernel,
                           wanted, wanted, kernel)

    def scorer_stats(self) -> dict[str, dict]:
        """The counters (``stats``) of this process's scorers by identity key, plus what the xdist workers sent."""
        out = {key: dict(counts) for key, counts in self.worker_stats.items()}
        for key, scorer in self._scorers.items():
            for name, value in (scorer.stats if capabilities(scorer).stats else {}).items():
                out.setdefault(key, {})[name] = out.get(key, {}).get(name, 0) + value
        return out

    def endpoint_unreachable(self) -> str | None:
        """Why a served model's endpoint cannot be reached (its scorer connects here, once), or None."""
        try:
            self.scorer(self.settings.device)
        except HarnessError as exc:
            return str(exc) if exc.stops_run else None
        return None

    def served_capability(self) -> str:
        """What a served model is, in one line: which model at which endpoint, and whether its answers carry
        probabilities (decided once, when it connects), or why it cannot be reached."""
        where = f"served model at {self.settings.endpoint}"
        try:
            scorer = self.scorer(self.settings.device)
        except HarnessError as exc:
            return f"{where}: {exc}"
        if scorer.probabilities:
            identity = scorer.identity
            return f"{where}: {scorer.model_id}, scored: {identity.get('scored')} ({identity.get('probabilities')})"
        return (f"{where}: {scorer.model_id}, generation-only (the server returns no top_logprobs): answers are "
                "extracted from the text; ECE, flip floors and probability deltas are not available")

    # -- executors ------------------------------------------------------------------------------------

    def raise_failed_load(self, device: str, source: str) -> None:
        """Raise the error of ``source``'s scorer on ``device`` if it failed to load earlier (not retried)."""
        self._remembered(identity_key(device, source))

    def load_failed(self, device: str, source: str, exc: Exception) -> HarnessError:
        """The harness error of ``source``'s scorer failing to load on ``device`` (wherever the executor loads it),
        remembered so that it is not retried."""
        return self._load_failed(identity_key(device, source), source, device, exc)

    def connect_cluster(self) -> None:
        """Reach where the executor scores (a Ray cluster: an unreachable one is ClusterUnreachable)."""
        self.run_executor.connect()

    def executor(self, device: str, source: str = "rows"):
        """What scores ``source`` rows on ``device`` (the run executor's ``chunk_executor``)."""
        return self.run_executor.chunk_executor(device, source)

    def identity(self, device: str, source: str = "rows") -> dict:
        """The identity of the scorer of ``source`` rows on ``device``, wherever it is loaded."""
        return self.run_executor.identity(device, source)

    def invariance_run(self, device: str, source: str, rows, batch_size: int, temperatures):
        """The invariance conditions of ``rows`` on the ``source`` model, where the run's rows are scored."""
        return self.run_executor.invariance_run(device, source, rows, batch_size, temperatures)

    def executor_meta(self, device: str) -> dict | None:
        """Where the scoring of ``device`` ran, for the reports' meta (``Executor.meta``): None when in this
        process; for Ray the address, the actors, their nodes and devices, how many were replaced and how often
        they built, kept, took and built again a variant image."""
        return self.run_executor.meta(device)

    def close(self) -> None:
        """Let go of what the executor used (Ray: stop the actors and disconnect; nothing for a local run)."""
        self.run_executor.close()
