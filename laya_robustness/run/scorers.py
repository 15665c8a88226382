"""A run's scorers: the question model and the dual encoder its caption families probe, loaded once per device in
this process or held by a pool of Ray actors per device (``--executor ray``), with their identities and counters;
which families and conditions they cannot take, and why."""

from __future__ import annotations

from pathlib import Path

from laya_robustness.run.errors import HarnessError, stops_run
from laya_robustness.run.models import (
    DUAL_ENCODER_TYPES,
    expected_weights,
    identity_key,
    is_dual_encoder,
    load_source_scorer,
)
from laya_robustness.scoring.base import capabilities
from laya_robustness.scoring.in_memory import unwrapped


def served_without_dual(what: str) -> str:
    """Why ``what`` (a caption family, the dual encoder's conditions) does not run with a served model alone."""
    return (f"{what} probes a dual encoder (CLIP / SigLIP caption similarities), which a chat model behind a "
            "server does not give: it answers questions only (pass --dual-model to probe one)")


class RunScorers:
    """A run's models and where they score: the question model (``settings.model``, or ``model_object`` loaded in
    memory with its ``processor``) and the dual encoder its caption families probe, each loaded once per device
    in this process, or held by a pool of Ray actors per device (``--executor ray``). A failed load is remembered
    and not retried; its message goes to ``errors`` (the run's harness errors). ``root``: where the embedded
    default lives (the project root)."""

    def __init__(self, settings, root: Path, errors: list[str], model_object=None, processor=None):
        self.settings, self.root, self.errors = settings, Path(root), errors
        # a model in memory is scored as the transformers model under its wrappers (a peft model's base, its
        # adapters in place)
        self.model_object = None if model_object is None else unwrapped(model_object)
        self.processor = processor
        self._scorers: dict[str, object] = {}
        self._load_errors: dict[str, tuple[str, bool]] = {}  # identity key -> why its scorer could not load, fatal?
        self.identities: dict[str, dict] = {}  # identity key -> the loaded scorer's identity (also from workers)
        self.worker_stats: dict[str, dict] = {}  # identity key -> the xdist workers' scorer counters, summed
        self.cluster = None  # --executor ray: the Ray cluster (run.executors.ray_cluster.Cluster), once connected
        self._pools: dict[str, object] = {}  # device -> its RayActorPool (--executor ray)

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
        from laya_robustness.run.options import AUTO_MODEL

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
        """The dual encoder the caption families probe (see ``--dual-model``), or None."""
        from laya_robustness.embedded import EMBEDDED_DUAL_MODEL, EMBEDDED_MODEL

        chosen = self.settings.dual_model
        if chosen != "auto":
            return chosen
        if self.served or self.model_object is not None:  # weights behind a server, or in memory: no dual encoder
            return None
        if self.model_is_dual:
            return self.settings.model
        if Path(self.settings.model).resolve() == (self.root / EMBEDDED_MODEL).resolve():
            return str(self.root / EMBEDDED_DUAL_MODEL)
        return None

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
        if source == "captions" and self.dual_model is None and self.served:
            return served_without_dual(family)
        if source == "captions" and self.dual_model is None:
            return (f"{family} probes a dual encoder and none is given: pass a CLIP / SigLIP --model, or "
                    "--dual-model <hub id or directory>")
        return None

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

    def _load_failed(self, key: str, model, device: str, exc: Exception) -> HarnessError:
        named = repr(model) if model is not None else "(the endpoint's only model)"
        message = f"cannot load scorer {self.settings.scorer!r} for model {named} on {device}: {exc}"
        self._load_errors[key] = (message, stops_run(exc))
        return self.harness_error(message, stops_run(exc))

    def _load(self, device: str, source: str):
        if source == "rows" and self.model_object is not None:
            from laya_robustness.scoring.factory import load_scorer

            s = self.settings
            return load_scorer("hf", self.model_object, processor=self.processor, device=device,
                               precision=s.precision, batch_size=s.batch_size,
                               attn_implementation=s.attn_implementation, feature_cache_bytes=s.feature_cache_mb << 20,
                               pixel_cache_bytes=s.pixel_cache_mb << 20, prefix_cache_bytes=s.prefix_cache_mb << 20)
        model = self.dual_model if source == "captions" else self.settings.model
        return load_source_scorer(self.settings, model, device, dual=source == "captions" or self.model_is_dual)

    def scorer(self, device: str, source: str = "rows"):
        """The model scoring ``source`` rows on ``device`` (the dual encoder for captions), loaded once; a failed
        load is remembered and not retried. Its identity is kept under ``identity_key``."""
        key = identity_key(device, source)
        self._remembered(key)
        if key not in self._scorers:
            try:
                scorer = self._load(device, source)
            except Exception as exc:  # any failure to load is the harness's, not the gate's
                model = self.dual_model if source == "captions" else self.settings.model
                raise self._load_failed(key, model, device, exc) from exc
            self._scorers[key] = scorer
            self.identities[key] = dict(getattr(scorer, "identity", {}))
        return self._scorers[key]

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
            return f"{where}: {scorer.model_id}, option probabilities from the top_logprobs of the first answer token"
        return (f"{where}: {scorer.model_id}, generation-only (the server returns no top_logprobs): answers are "
                "extracted from the text; ECE, flip floors and probability deltas are not available")

    # -- executors ------------------------------------------------------------------------------------

    @property
    def uses_ray(self) -> bool:
        return self.settings.executor == "ray"

    def connect_cluster(self) -> None:
        """--executor ray: connect to the cluster (an unreachable one: ClusterUnreachable)."""
        if self.uses_ray and self.cluster is None:
            from laya_robustness.run.executors.ray_cluster import connect

            self.cluster = connect(self.settings.ray_address)

    def executor(self, device: str, source: str = "rows"):
        """What scores ``source`` rows on ``device``: this process (``executors.local``) or the run's Ray actors."""
        if not self.uses_ray:
            from laya_robustness.run.executors.local import executor_for
            from laya_robustness.run.scoring import Scoring

            s = self.settings
            return executor_for(Scoring(self.scorer(device, source), s.scoring_path, s.temperatures))
        return self._pool(device, source).executor(source)

    def identity(self, device: str, source: str = "rows") -> dict:
        """The identity of the scorer of ``source`` rows on ``device``, wherever it is loaded."""
        if self.uses_ray:
            self._pool(device, source)
            return dict(self.identities[identity_key(device, source)])
        return dict(getattr(self.scorer(device, source), "identity", {}))

    def invariance_run(self, device: str, source: str, rows, batch_size: int, temperatures):
        """The invariance conditions of ``rows`` on the ``source`` model: in this process, or on the pool's first
        actor, where the run's rows are scored."""
        if self.uses_ray:
            return self._pool(device, source).invariance(source, rows, batch_size, temperatures)
        from laya_robustness.run.invariance import invariance_run

        return invariance_run(self.scorer(device, source), rows, batch_size, temperatures)

    def _pool(self, device: str, source: str):
        """The Ray actors scoring on ``device`` (started once), with ``source``'s scorer loaded on each; a failure
        to start them or to load it is remembered and not retried (as a scorer's failed load)."""
        key = identity_key(device, source)
        self._remembered(key)
        try:
            if device not in self._pools:
                self._pools[device] = self._start_pool(device)
            if key not in self.identities:
                self.identities[key] = self._pools[device].prepare(source)
        except HarnessError as exc:
            model = self.dual_model if source == "captions" else self.settings.model
            raise self._load_failed(key, model, device, exc) from exc
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
                            f"the Ray actors at {s.ray_address}", expected, self.cluster, s.image_cache_mb << 20,
                            s.keep_freed_memory)

    def executor_meta(self, device: str) -> dict | None:
        """Where the scoring of ``device`` ran, for the reports' meta: None when in this process (the executor
        is local); for Ray the address, the actors, their nodes and devices, how many were replaced and how
        often they built, kept, took and built again a variant image."""
        if not self.uses_ray:
            return None
        pool = self._pools.get(device)
        return {"name": "ray", "address": self.settings.ray_address, **(pool.meta() if pool else {"actors": 0})}

    def close(self) -> None:
        """Stop the run's Ray actors and disconnect from the cluster (nothing to do for a local run)."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
