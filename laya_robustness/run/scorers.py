"""A run's scorers: the question model and the dual encoder its caption families probe, loaded once per device in
this process or held where its executor scores (``--executor``, ``run.executors``: a pool of Ray actors per device),
with their identities and counters; which families and conditions they cannot take, and why."""

from __future__ import annotations

import logging
from pathlib import Path

from laya_robustness.embedded import EMBEDDED_DUAL_MODEL
from laya_robustness.run.errors import HarnessError, stops_run
from laya_robustness.run.executors.registry import make_executor
from laya_robustness.run.pipeline.models import (
    DUAL_ENCODER_TYPES,
    identity_key,
    is_dual_encoder,
    load_source_scorer,
)
from laya_robustness.scoring.base import capabilities
from laya_robustness.scoring.in_memory import unwrapped


logger = logging.getLogger("laya_robustness")


def served_without_dual(what: str) -> str:
    """Why ``what`` (a caption family, the dual encoder's conditions) does not run with a served model alone."""
    return (f"{what} probes a dual encoder (CLIP / SigLIP caption similarities), which a chat model behind a "
            "server does not give: it answers questions only (pass --dual-model to probe one)")


class RunScorers:
    """A run's models and where they score: the question model (``settings.model``, or ``settings.in_memory``: a
    model loaded in memory with its processor) and the dual encoder its caption families probe, each loaded once per device
    in this process, or held where ``run_executor`` scores (``--executor``: a pool of Ray actors per device), to
    which the scoring is delegated. A failed load is remembered and not retried; its message goes to ``errors``
    (the run's harness errors). ``root``: where the embedded default lives (the project root)."""

    def __init__(self, settings, root: Path, errors: list[str]):
        self.settings, self.root, self.errors = settings, Path(root), errors
        # a model in memory is scored as the transformers model under its wrappers (a peft model's base, its
        # adapters in place)
        in_memory = settings.in_memory
        self.model_object = None if in_memory is None else unwrapped(in_memory.model)
        self._scorers: dict[str, object] = {}
        self._load_errors: dict[str, tuple[str, bool]] = {}  # identity key -> why its scorer could not load, fatal?
        self.identities: dict[str, dict] = {}  # identity key -> the loaded scorer's identity (also from workers)
        self.worker_stats: dict[str, dict] = {}  # identity key -> the xdist workers' scorer counters, summed
        self.run_executor = make_executor(settings.executor, self)  # where the rows are scored (--executor)

    # -- which models --------------------------------------------------------------------------------

    @property
    def served(self) -> bool:
        """Whether the model is behind a server (``--scorer openai``): it answers in text over requests."""
        from laya_robustness.scoring.factory import SERVED_SCORER

        return self.settings.scorer == SERVED_SCORER

    @property
    def model_name(self) -> str:
        """The model as the user named it (recorded in meta and the snapshot name); a served model left to the
        endpoint (``--model`` omitted) by the id the endpoint gave."""
        from laya_robustness.run.inputs.options import AUTO_MODEL

        if self.settings.model_name != AUTO_MODEL or not self.served:
            return self.settings.model_name
        return self.identities.get(identity_key(self.settings.device, "rows"), {}).get("model", AUTO_MODEL)

    @property
    def model_is_dual(self) -> bool:
        """Whether the model is a dual encoder (CLIP / SigLIP): it answers no questions, it is probed."""
        if self.model_object is not None:
            return getattr(self.model_object.config, "model_type", None) in DUAL_ENCODER_TYPES
        return self.settings.scorer == "hf" and is_dual_encoder(self.settings.model)

    @property
    def dual_model(self) -> str | None:
        """The dual encoder the caption families probe (see ``--dual-model``), or None. Left to ``auto``: the
        ``--model`` when it is one; the embedded dual encoder beside the embedded model when the rows are the
        embedded ones too or ``--captions`` names caption rows (a run on one's own ``--data`` is about its rows)."""
        chosen = self.settings.dual_model
        if chosen != "auto":
            return chosen
        if self.served or self.model_object is not None:  # weights behind a server, or in memory: no dual encoder
            return None
        if self.model_is_dual:
            return self.settings.model
        if self._embedded("model") and (self._embedded("data") or not self._embedded("captions")):
            return str(self.root / EMBEDDED_DUAL_MODEL)
        return None

    def _embedded(self, name: str) -> bool:
        """Whether the setting ``name`` (model, data, captions) is the embedded default's (``Settings.embedded``,
        found once with the settings; a model in memory is not)."""
        return self.settings.is_embedded(name)

    @property
    def own_data(self) -> bool:
        """Whether the rows are the user's own (``--data`` other than the embedded fixture rows)."""
        return not self._embedded("data")

    def probes_captions(self, families) -> bool:
        """Whether caption rows are read: a caption family is among ``families`` and a dual encoder is there."""
        from laya_robustness.families import get_family

        return self.dual_model is not None and any(get_family(f).source == "captions" for f in families)

    def skip_reason(self, family: str) -> str | None:
        """Why a family cannot run with these models, or None."""
        from laya_robustness.families import get_family

        source = get_family(family).source
        if source == "rows" and self.model_is_dual:
            return (f"{self.settings.model_name} is a dual encoder: it answers no questions, so {family} does not "
                    "apply (the lgip families probe it)")
        if source == "captions":
            return self.no_dual_reason(family)
        return None

    def no_dual_reason(self, what: str) -> str | None:
        """Why ``what`` (a caption family, the dual encoder's conditions) does not run: no dual encoder; or None."""
        if self.dual_model is not None:
            return None
        if self.served:
            return served_without_dual(what)
        if self._embedded("model"):  # one reason for every caption test, so a run's skips count it once
            return (f"the embedded dual encoder (the lgip families, test_dual_invariance) is probed with the "
                    f"embedded rows only: on your own --data ask for it with --dual-model {EMBEDDED_DUAL_MODEL} (or "
                    "probe yours with --dual-model and --captions)")
        return ("the lgip families and test_dual_invariance probe a dual encoder and none is given: pass a CLIP / "
                "SigLIP --model, or --dual-model <hub id or directory>")

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
        model = self.source_model(source)
        named = repr(model) if model is not None else "(the endpoint's only model)"
        message = f"cannot load scorer {self.settings.scorer!r} for model {named} on {device}: {exc}"
        stop = source == "rows" or stops_run(exc)
        self._load_errors[key] = (message, stop)
        return self.harness_error(message, stop)

    def _load(self, device: str, source: str):
        return load_source_scorer(self.settings, self.source_model(source), device,
                                  dual=source == "captions" or self.model_is_dual)

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
            self.identities[key] = dict(getattr(scorer, "identity", {}))
            if source == "rows" and self.model_object is not None:
                self._say_attention(self.identities[key].get("attn_implementation"))
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

    def source_model(self, source: str) -> str | None:
        """The model scoring ``source`` rows: the dual encoder for captions, else the model (a model in memory by
        its name)."""
        if source == "captions":
            return self.dual_model
        return self.settings.model_name if self.model_object is not None else self.settings.model

    @property
    def cluster(self):
        """The cluster the run's executor scores on (``Executor.cluster``), None for this process."""
        return self.run_executor.cluster

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
