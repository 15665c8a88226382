"""``--executor ray``: a run's rows scored on a pool of Ray actors per device (``RayExecutor``), on the cluster
``--ray-address`` names, each actor holding the run's scorers; and what the Ray options need before a run starts
(``check_ray``). Ray itself is imported only once the executor connects (``ray_cluster``, ``ray_pool``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from laya_robustness.run.errors import HarnessError, UsageError
from laya_robustness.run.executors.base import ScorerSource, alone
from laya_robustness.run.executors.ray_cluster import INSTALL_HINT, ray_installed
from laya_robustness.run.pipeline.scorer_sources import expected_weights, identity_key

if TYPE_CHECKING:
    from laya_robustness.run.pipeline.cell_scoring import CellPlan
    from laya_robustness.run.executors.ray_pool import PoolChunkExecutor, RayActorPool
    from laya_robustness.run.executors.ray_stream import RayStream

#: The options only ``--executor ray`` uses.
RAY_OPTIONS = ("--ray-address", "--ray-actors")


def check_ray(values: Mapping[str, Any], xdist_workers: object) -> None:
    """--executor ray needs Ray installed and no xdist (each a usage error naming --executor)."""
    if not ray_installed():
        raise UsageError(f"--executor ray: Ray is not installed; {INSTALL_HINT}", "--executor")
    if xdist_workers not in (None, 0, "0"):
        raise UsageError(f"--executor ray: the Ray actors spread the scoring; it cannot run with xdist (-n "
                         f"{xdist_workers}): drop -n", "--executor")


class RayExecutor:
    """Scores a run's rows on Ray actors: one pool per device (started on first use, on the cluster it connects to
    once), each actor loading the question model and the dual encoder of ``scorers`` (the run's
    ``run.scorers.ScorerPool``, as ``base.ScorerSource``) as asked, with the weights this machine resolved (checked
    on every actor). The run's planned cells are streamed, a pixel family's variant images are built on the actors,
    and no scorer is loaded in this process. A failure to start a pool or to load a scorer on it is remembered and
    not retried, as a scorer's failed load (``ScorerSource.load_failed``); the identities of the scorers the actors
    load are kept here (``identities``)."""

    streams = builds_variants = holds_scorers = True
    world = sharing_world = staticmethod(alone)  # the actors score for this process, which runs the run

    def __init__(self, scorers: ScorerSource):
        self.scorers = scorers
        self.cluster = None  # the Ray cluster (ray_cluster.Cluster), once connected
        self._pools: dict[str, RayActorPool] = {}  # device -> its actors
        self._identities: dict[str, dict] = {}  # identity key -> the identity of the scorer its actors loaded

    def connect(self) -> None:
        """Connect to the cluster at ``--ray-address`` (an unreachable one: ClusterUnreachable)."""
        if self.cluster is None:
            from laya_robustness.run.executors.ray_cluster import connect

            self.cluster = connect(self.scorers.settings.ray_address)

    def chunk_executor(self, device: str, source: str) -> PoolChunkExecutor:
        """The pool's executor of ``source`` rows on ``device``."""
        return self._pool(device, source).chunk_executor(source)

    def identity(self, device: str, source: str) -> dict:
        """The identity of ``source``'s scorer, the same on every actor."""
        self._pool(device, source)
        return dict(self._identities[identity_key(device, source)])

    def identities(self) -> dict[str, dict]:
        """The identities of the scorers loaded on the actors, by identity key."""
        return {key: dict(identity) for key, identity in self._identities.items()}

    def invariance_run(self, device: str, source: str, rows: Sequence, batch_size: int, temperatures):
        """The invariance conditions of ``rows``, run on the pool's first actor."""
        return self._pool(device, source).invariance(source, rows, batch_size, temperatures)

    def stream(self, device: str, source: str, keys: Sequence[tuple],
               plan_of: Callable[[tuple], CellPlan]) -> RayStream:
        """The cells ``keys`` scored as one stream on the pool of ``device`` (``ray_stream.RayStream``)."""
        from laya_robustness.run.executors.ray_stream import RayStream

        pool = self._pool(device, source)
        pool.prepare(source)
        return RayStream(pool, source, keys, plan_of)

    def _pool(self, device: str, source: str) -> RayActorPool:
        """The Ray actors scoring on ``device`` (started once), with ``source``'s scorer loaded on each; a failure
        to start them or to load it is remembered and not retried (as a scorer's failed load)."""
        scorers, key = self.scorers, identity_key(device, source)
        scorers.raise_failed_load(device, source)
        try:
            if device not in self._pools:
                self._pools[device] = self._start_pool(device)
            if key not in self._identities:
                self._identities[key] = self._pools[device].prepare(source)
        except HarnessError as exc:
            raise scorers.load_failed(device, source, exc) from exc
        return self._pools[device]

    def _start_pool(self, device: str) -> RayActorPool:
        """Start the Ray actors of ``device``: each can load the question model and the dual encoder."""
        from functools import partial

        from laya_robustness.run.executors.ray_actor import actor_device, load_scoring
        from laya_robustness.run.executors.ray_pool import RayActorPool

        self.connect()
        scorers = self.scorers
        s, on, dual = scorers.settings, actor_device(device), scorers.models.is_dual
        loads = {"rows": partial(load_scoring, s, s.model, on, dual)}
        expected = {"rows": expected_weights(s.model, "hf" if dual else s.scorer)}
        dual_model = scorers.models.dual_model
        if dual_model is not None:
            loads["captions"] = partial(load_scoring, s, dual_model, on, True)
            expected["captions"] = expected_weights(dual_model, "hf")
        gpus = device.startswith("cuda")
        return RayActorPool(loads, on, self.cluster.actor_count(s.ray_actors, gpus), gpus,
                            f"the Ray actors at {s.ray_address}", expected, self.cluster, s.image_cache_mb << 20,
                            s.keep_freed_memory)

    def meta(self, device: str) -> dict:
        """The address, the actors, their nodes and devices, how many were replaced and how often they built, kept,
        took and built again a variant image."""
        pool = self._pools.get(device)
        return {"name": "ray", "address": self.scorers.settings.ray_address,
                **(pool.meta() if pool else {"actors": 0})}

    def close(self) -> None:
        """Stop the actors and disconnect from the cluster."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
