"""A pool of Ray actors that score shards of rows, each actor loading the run's scorer once (``--executor ray``).

``RayActorPool.records(shards)`` keeps a chunk executor's contract (``base.ChunkExecutor``): it yields ``(index,
records)`` of each shard as an actor finishes it, in any order, and each shard is scored in one ``Scoring.records``
call, so its batches are the local run's and so are its records. Underneath, ``results(feed)`` takes shards from a
feed as actors free up, so a feed may give shards that depend on results already yielded (``ray_stream``: a run's
cells). Scheduling: an actor has at most ``PIPELINE`` shards in flight (one scoring, one waiting, so it never idles
while the next is sent); where chunks are made ahead (``run.pipeline.prefetch.chunks_ahead``, N), it runs
``PIPELINE + N`` calls side by side, so a chunk's pixels and a group's variants are made while it scores another chunk (at most
N chunks beside the one being scored). Scoring goes first: a free actor takes a waiting chunk to score before a
group to build, and a group to build never waits behind a chunk on an actor (the cell's later rows wait for it), so
the actors that are not scoring build, and chunks are scored as soon as their rows are in. The groups of one chunk
(the source rows whose variant rows are expected to land in it) are built by the actor that claims the chunk, which
becomes their images' home and so scores the chunk: the images stay in that actor's memory instead of passing
through Ray's object store to another actor. Among the waiting chunks an actor takes the one with most rows whose
image it built or was the first to score (their home), then one no actor has seen, so an image's later families (its
rephrasings, its languages) meet the features that actor's encode-once cache already holds. What is another actor's
(a chunk at home there, a group of a chunk it claimed) a free actor takes only when no actor has a shard of its own
to take, rather than idle. A shard whose actor dies (its process killed, its node lost) is sent again to another
actor and the dead one is replaced (as is one that dies while it loads); records are taken only from shards that
completed, so none is lost or duplicated. A shard lost with ``MAX_ATTEMPTS`` actors in turn, or an exception raised
by the scorer (it would raise anywhere), stops the call."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.errors import HarnessError
from laya_robustness.run.executors.ray_actor import ScoringActor
from laya_robustness.run.executors.ray_cluster import ClusterLost
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.image_store import DEFAULT_IMAGE_CACHE_BYTES
from laya_robustness.run.pipeline.prefetch import chunks_ahead
from laya_robustness.run.pipeline.variant_rows import expected_chunks
from laya_robustness.scoring.cache import ByteLRU
from laya_robustness.weights import short_hashes

#: Shards in flight per actor.
PIPELINE = 2
#: Actors a shard may be lost with before the run stops.
MAX_ATTEMPTS = 3
#: Waiting shards per actor a free actor chooses among.
LOOKAHEAD = 8
#: Seconds a wait for results lasts before the cluster's head is checked (a lost head is found in seconds).
WAIT_S = 1.0
#: Groups (calls) one chunk's source rows are built in, all on the actor that claims the chunk, which then scores it.
GROUPS_PER_CHUNK = 4
#: Rows a chunk is taken to hold where the chunks have no fixed size (the predict path).
FALLBACK_CHUNK_ROWS = 256
#: Image clusters whose home the pool remembers, those sent most recently (about 10 MiB of keys): an older image's
#: features have left its actor's caches (a 1 GiB feature cache holds about 7,000 tiles), so its home says nothing.
HOME_CLUSTERS = 1 << 16
#: Chunks per actor whose builder the pool remembers, those claimed most recently: a chunk's builder matters only
#: while its groups wait or are built, and at most ``LOOKAHEAD + PIPELINE`` shards per actor do.
BUILDING_CHUNKS_PER_ACTOR = 4 * (LOOKAHEAD + PIPELINE)


@dataclass
class Slot:
    """One place in the pool: its actor, where it runs (None while it loads) and its shards in flight."""

    number: int
    actor: object
    ready: object  # the ref of its prepare() call, until it answers
    where: dict | None = None
    in_flight: int = 0
    building: int = 0  # of which groups being built (``variants``)

    @property
    def scoring(self) -> bool:
        """Whether a chunk of rows is being scored (or waits) on it."""
        return self.in_flight > self.building


@dataclass
class Shard:
    """Rows sent to one actor's ``method`` (``records``: scored; ``variants``: a family's variants built), with
    ``args`` after the rows."""

    index: object  # what ``results`` yields it with (a number, or a stream's (cell, kind, number))
    source: str
    rows: Sequence[Row]
    method: str = "records"
    args: tuple = ()
    chunk: object = None  # a group to build: the chunk its variant rows are expected to land in (None: any actor)
    attempts: int = 0
    clusters: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.clusters = Counter(r.cluster for r in self.rows)

    @property
    def builds(self) -> bool:
        """Whether the shard builds variants (rather than scoring rows)."""
        return self.method == "variants"


class Feed(Protocol):
    """Where ``RayActorPool.results`` takes shards from: ``take(n)`` gives up to ``n`` shards ready now (none when
    every shard left waits for results still to come, or when there are no more)."""

    def take(self, n: int) -> list[Shard]: ...


class ShardsOf:
    """A ``Feed`` of shards known in advance, taken in order."""

    def __init__(self, shards: Iterable[Shard]):
        self.shards = iter(shards)

    def take(self, n: int) -> list[Shard]:
        return list(islice(self.shards, n))


def placement_stores(n_actors: int) -> tuple[ByteLRU, ByteLRU]:
    """What a pool of ``n_actors`` remembers to place shards, each entry counting one: image cluster -> the slot
    that scored it first (``HOME_CLUSTERS`` entries), and chunk whose groups are being built -> the slot that builds
    them (``BUILDING_CHUNKS_PER_ACTOR`` per actor); the least recently used go first."""
    return ByteLRU(HOME_CLUSTERS), ByteLRU(BUILDING_CHUNKS_PER_ACTOR * n_actors)


def _cause(exc: Exception) -> BaseException:
    """The exception a remote call raised, as it was raised (Ray wraps it in a RayTaskError); one that could not be
    sent back whole (Ray's ``UnserializableException``) as ``unsent``'s stand-in of its type and message."""
    from ray.exceptions import UnserializableException

    if isinstance(exc, UnserializableException):
        return unsent(str(getattr(exc, "_original_stack_trace", "") or exc))
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


#: The last line of a formatted traceback: ``module.Type: message`` (or the type alone).
_RAISED = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?$")


def unsent(stack_trace: str) -> Exception:
    """A stand-in for an exception an actor raised that Ray could not unpickle here: an exception of its type's name
    whose message is its own, from the last line of its formatted traceback (the harness error then reads
    ``ValueError: ...``, not ``UnserializableException: Failed to deserialize ...``).

    >>> error = unsent("Traceback (most recent call last):\\n  File ...\\nhelpers.fakes.Unpicklable: no grey for 'none'\\n")
    >>> type(error).__name__, str(error)
    ('Unpicklable', "no grey for 'none' (raised on a Ray actor; its exception could not be sent back whole)")
    """
    for line in reversed(stack_trace.strip().splitlines()):
        raised = _RAISED.match(line.strip())
        if raised:
            name = raised["name"].rsplit(".", 1)[-1]
            message = raised["message"] or ""
            break
    else:
        name, message = "RemoteError", stack_trace.strip()[-500:]
    stand_in = type(name, (RuntimeError,), {"__module__": __name__})
    return stand_in(f"{message} (raised on a Ray actor; its exception could not be sent back whole)".lstrip())


class RayActorPool:
    """``n_actors`` actors on the connected cluster, each holding the scorers ``loads`` build (per row source) on
    ``device``, one GPU each when ``gpus``, else one CPU; ``label`` names the pool in errors. Each actor holds
    ``image_cache_bytes`` of images and, with ``keep_freed_memory``, has malloc keep freed memory
    (``ScoringActor``)."""

    #: Chunks an actor makes ready while it scores one (``run.pipeline.prefetch.chunks_ahead``); 0: one call at a time.
    ahead = 0

    def __init__(self, loads: Mapping[str, Callable[[], Scoring]], device: str, n_actors: int, gpus: bool,
                 label: str, expected: Mapping[str, dict | None] | None = None, cluster=None,
                 image_cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES, keep_freed_memory: bool = False):
        import ray

        self.label, self.device, self.replaced, self.cluster = label, device, 0, cluster
        self._checked = 0.0  # when the head was last asked whether it answers (time.monotonic)
        self.image_cache_bytes, self.keep_freed_memory = image_cache_bytes, keep_freed_memory
        self.expected = dict(expected or {})  # source -> the weights' sha256 this machine found (None: unknown)
        self.ahead = chunks_ahead()
        options = {"num_cpus": 1, "num_gpus": 1 if gpus else 0, "max_restarts": 0, "max_task_retries": 0,
                   "max_concurrency": self.room if self.ahead else 1}
        self._actor_class = ray.remote(**options)(ScoringActor)
        self._loads = dict(loads)
        self.sources: list[str] = []  # the sources every actor has loaded
        self.home, self.builder = placement_stores(n_actors)
        self.failed: Shard | None = None  # the shard whose error ``results`` raised last
        self.slots = [self._new_slot(i) for i in range(n_actors)]
        for slot in self.slots:
            self._wait_ready(slot)

    @property
    def room(self) -> int:
        """Shards in flight per actor: ``PIPELINE``, and one more per chunk made ahead."""
        return PIPELINE + self.ahead

    # -- actors ---------------------------------------------------------------------------------

    def _new_slot(self, number: int) -> Slot:
        actor = self._actor_class.remote(self._loads, self.device, self.image_cache_bytes, self.keep_freed_memory)
        return Slot(number, actor, actor.prepare.remote(self.sources))

    def _alive(self) -> None:
        """ClusterLost once the cluster's head stops answering (``ray_cluster.Cluster.check_alive``), asked at most
        every ``WAIT_S`` seconds: while results keep arriving too (the actors score on without the head, but Ray
        ends this process a minute after the head is gone)."""
        import time

        if self.cluster is not None and time.monotonic() - self._checked >= WAIT_S:
            self._checked = time.monotonic()
            self.cluster.check_alive()

    def get(self, ref):
        """``ray.get(ref)``, checking every second it waits that the cluster's head still answers: a lost head is
        ClusterLost in seconds (Ray itself would end the process after a minute)."""
        import ray

        while not ray.wait([ref], timeout=WAIT_S)[0]:
            self._alive()
        return ray.get(ref)

    def _wait_ready(self, slot: Slot) -> None:
        """Wait until the slot's actor has loaded its scorers; an actor lost while it loads (its process killed, its
        node gone) is replaced as one lost while scoring is, ``MAX_ATTEMPTS`` actors in turn at most."""
        from ray.exceptions import RayActorError

        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                slot.where = self.get(slot.ready)
                break
            except ClusterLost:
                raise
            except RayActorError as exc:
                if attempt == MAX_ATTEMPTS:
                    raise HarnessError(f"{self.label}: {MAX_ATTEMPTS} Ray actors in turn were lost while they loaded "
                                       f"the scorer; the last: {_load_error(exc)}") from None
                self._replace(slot)
            except Exception as exc:  # the scorer raised while it loaded on the actor
                raise HarnessError(f"{self.label}: a Ray actor could not load the scorer: {_load_error(exc)}") from None
        slot.ready = None
        self._check_same_models()

    def _check_same_models(self) -> None:
        """Every actor loaded the same ``source`` model, with the weights this machine found where it found them;
        HarnessError naming the nodes and both weights' hashes otherwise (before any row is scored)."""
        for source in self.sources:
            loaded = [(s.where["node"], s.where["identities"][source]) for s in self.slots
                      if s.where and source in s.where["identities"]]
            expected = self.expected.get(source)
            for node, identity in loaded:
                if expected is not None and identity.get("weights_sha256") != expected:
                    raise HarnessError(
                        f"{self.label}: the actor on node {node} loaded {source} model {identity.get('model')!r} with "
                        f"weights {short_hashes(identity.get('weights_sha256'))}, but the model this run resolved "
                        f"has weights {short_hashes(expected)}: give --model as a path every node reads the same "
                        "checkpoint at (absolute, on shared storage) or a hub id", stops_run=True)
            identities = {repr(sorted(identity.items())): node for node, identity in loaded}
            if len(identities) > 1:
                raise HarnessError(f"{self.label}: the actors loaded different {source} models (nodes "
                                   f"{sorted(identities.values())}): every node must see the same checkpoint")

    def prepare(self, source: str) -> dict:
        """Load ``source``'s scorer on every actor (once) and return its identity, the same on all of them."""
        if source not in self.sources:
            self.sources.append(source)
            for slot in self.slots:
                if slot.ready is None:
                    slot.ready = slot.actor.prepare.remote([source])
            for slot in self.slots:
                where = slot.where
                self._wait_ready(slot)
                if where:  # keep what the actor said before, add the new identity
                    slot.where = {**where, "identities": {**where["identities"], **slot.where["identities"]}}
            self._check_same_models()
        return dict(next(s.where for s in self.slots if s.where)["identities"][source])

    def _replace(self, slot: Slot) -> None:
        import ray

        ray.kill(slot.actor, no_restart=True)
        fresh = self._new_slot(slot.number)
        slot.actor, slot.ready, slot.where, slot.in_flight, slot.building = fresh.actor, fresh.ready, None, 0, 0
        self.replaced += 1

    def meta(self) -> dict:
        """How many actors, on which nodes (IP address -> actors), on which devices, how many were replaced, whether
        every actor's malloc kept freed memory, and the variant images they built, kept, took and built again."""
        nodes = Counter(s.where["node"] for s in self.slots if s.where)
        names = sorted({s.where["device_name"] for s in self.slots if s.where})
        kept = [s.where.get("keeps_freed_memory", False) for s in self.slots if s.where]
        return {"actors": len(self.slots), "nodes": dict(sorted(nodes.items())), "device_names": names,
                "replaced_actors": self.replaced, "keeps_freed_memory": bool(kept) and all(kept),
                "variant_images": self.image_counts()}

    def image_counts(self) -> dict:
        """The variant images the actors built, kept for one another, took from one another and built again, summed
        (``ScoringActor.image_counts``; an actor that was replaced took its counts with it); {} once the cluster
        is lost."""
        if self.cluster is not None and self.cluster.lost:
            return {}
        total: Counter = Counter({"built": 0, "kept": 0, "fetched": 0, "built_again": 0})
        for slot in self.slots:
            if slot.ready is None:
                try:
                    total.update(self.get(slot.actor.image_counts.remote()))
                except Exception:  # an actor lost since its last shard: its counts are gone with it
                    continue
        return dict(total)

    def close(self) -> None:
        import ray

        if self.cluster is not None and self.cluster.lost:
            return  # nothing to ask of a head that is gone
        for slot in self.slots:
            ray.kill(slot.actor, no_restart=True)

    # -- scoring --------------------------------------------------------------------------------

    def chunk_executor(self, source: str) -> "PoolChunkExecutor":
        """The chunk executor of ``source`` rows on this pool (``base.ChunkExecutor``)."""
        self.prepare(source)
        return PoolChunkExecutor(self, source)

    def records(self, source: str, shards: Iterable[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        """``(index, records)`` of each shard of ``source`` rows as it finishes (see the module doc)."""
        return self.results(ShardsOf(Shard(i, source, rows) for i, rows in enumerate(shards)))

    def object_store_bytes(self) -> int:
        """The cluster's object store, in bytes (what Ray keeps objects in before it spills them to disk)."""
        import ray

        return int(ray.cluster_resources().get("object_store_memory", 0))

    @staticmethod
    def variant_groups(rows: Sequence[Row], chunks: Sequence[int]) -> list[tuple[int, Sequence[Row]]]:
        """``rows`` (source rows) in the groups whose variants one actor builds in one call, each with the chunk
        its variant rows are expected to land in (``chunks``, one per row, ``run.pipeline.variant_rows.expected_chunks``):
        the rows of one chunk cut into ``GROUPS_PER_CHUNK`` groups, which the actor that claims the chunk builds."""
        groups: list[tuple[int, Sequence[Row]]] = []
        start = 0
        while start < len(rows):
            end = start
            while end < len(rows) and chunks[end] == chunks[start]:
                end += 1
            size = -(-(end - start) // GROUPS_PER_CHUNK)
            groups += [(chunks[start], rows[i:min(i + size, end)]) for i in range(start, end, size)]
            start = end
        return groups

    def variants(self, source: str, family: str, rows: Sequence[Row], seed: int) -> list[Row]:
        """``family``'s variant rows of the source ``rows``, in their order, built on the actors (one call per
        ``variant_groups`` group): each group's images wait in the store of the actor that built it, which is their
        clusters' home, so the chunks that score them mostly go there (another actor takes them from Ray's object
        store, or builds them again)."""
        groups, call = self.variant_groups(rows, expected_chunks(family, len(rows), FALLBACK_CHUNK_ROWS)), object()
        built: dict[int, list[Row]] = dict(self.results(ShardsOf(
            Shard(i, source, group, "variants", (family, seed), chunk=(call, chunk))
            for i, (chunk, group) in enumerate(groups))))
        return [row for i in range(len(groups)) for row in built[i]]

    def results(self, feed: "Feed") -> Iterator[tuple[object, list]]:
        """``(index, result)`` of each shard ``feed`` gives, as an actor finishes it (see the module doc). The feed
        is asked for more shards whenever fewer than ``LOOKAHEAD`` per actor wait, so it may give shards that depend
        on results already yielded (a stream of cells). A shard whose scorer raised is ``failed`` when the
        exception propagates."""
        import ray
        from ray.exceptions import RayActorError

        waiting: list[Shard] = []
        running: dict[object, tuple[Slot, object, Shard | None]] = {}  # ref -> (slot, its actor, shard or None)
        self.failed = None
        try:
            while True:
                waiting += feed.take(max(0, LOOKAHEAD * len(self.slots) - len(waiting)))
                self._dispatch(waiting, running)
                if not running:
                    return
                done, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_S)
                self._alive()
                if not done:
                    continue
                [ref] = done
                slot, actor, shard = running.pop(ref)
                if shard is None:  # a replacement actor finished loading
                    self._wait_ready(slot)
                    continue
                try:
                    result = ray.get(ref)
                except RayActorError as exc:
                    self._lost(slot, actor, shard, exc, waiting)
                    continue
                except Exception as exc:
                    self.failed = shard
                    raise _cause(exc) from None
                slot.in_flight -= 1
                slot.building -= shard.builds
                yield shard.index, result
        finally:  # stopped early: the shards still queued are not scored (an actor that is loading goes on)
            lost = self.cluster is not None and self.cluster.lost
            for ref, (slot, actor, shard) in running.items():
                if shard is not None and slot.actor is actor:  # a later call may send its shards again
                    slot.in_flight -= 1
                    slot.building -= shard.builds
                    if not lost:
                        ray.cancel(ref)

    def _dispatch(self, waiting: list[Shard], running: dict) -> None:
        """Hand waiting shards to the ready actors with room, the least busy first (``_pick`` says what each may
        take; what is another actor's is taken only when no actor has a shard of its own to take); watch loading
        actors."""
        for slot in self.slots:
            if slot.ready is not None and slot.ready not in running:
                running[slot.ready] = (slot, slot.actor, None)
        while waiting:
            free = sorted((s for s in self.slots if s.ready is None and s.in_flight < self.room),
                          key=lambda s: (s.scoring, s.in_flight))  # idle, building, scoring
            picks = ((slot, self._pick(slot, waiting, steal)) for steal in (False, True) for slot in free)
            slot, position = next(((s, p) for s, p in picks if p is not None), (None, None))
            if slot is None:
                return
            shard = waiting.pop(position)
            if shard.builds and shard.chunk is not None and shard.chunk not in self.builder:
                self.builder.put(shard.chunk, slot.number, nbytes=1)
            for cluster in shard.clusters:  # an actor that builds variants holds their images: their new home
                if shard.builds or cluster not in self.home:
                    self.home.put(cluster, slot.number, nbytes=1)
                else:
                    self.home.touch(cluster)
            slot.in_flight += 1
            slot.building += shard.builds
            method = getattr(slot.actor, shard.method)
            running[method.remote(shard.source, shard.rows, *shard.args)] = (slot, slot.actor, shard)

    def _pick(self, slot: Slot, waiting: Sequence[Shard], steal: bool = False) -> int | None:
        """The position of the waiting shard ``slot`` takes next, None if none.

        A chunk to score first: the one with most rows at home on the slot, then fewest at home on another, then
        the oldest; one whose rows are all at home on other actors, or one to wait behind the slot's chunk being
        scored, only with ``steal`` (when no actor has a shard of its own to take), and the latter only when no
        actor is building (a builder is free sooner). Else, unless the slot is scoring (the cell's later rows would
        wait behind its chunk), the oldest group to build of a chunk the slot builds; then, if it builds nothing,
        of a chunk no actor builds yet (it claims the chunk: its images stay in its memory, and it will score it);
        with ``steal``, of any chunk. Where the actor runs calls side by side (``ahead``), nothing waits behind its
        chunk being scored: it takes chunks (their pixels made while they wait for the device) while it holds fewer
        than ``1 + ahead``, and groups to build as an idle actor does."""
        number = slot.number
        waits = slot.scoring and not self.ahead  # what it is sent now waits behind the chunk it scores
        full = self.ahead and slot.in_flight - slot.building > self.ahead  # one chunk scored, ``ahead`` made ready

        def score(position: int):
            counts = waiting[position].clusters
            mine = sum(n for c, n in counts.items() if self.home.get(c) == number)
            others = sum(n for c, n in counts.items() if self.home.get(c, number) != number)
            return (mine, -others, -position)

        chunks = [i for i, shard in enumerate(waiting) if not shard.builds]
        if chunks and not full and (steal or not waits) and not (waits and any(s.building for s in self.slots)):
            best = max(chunks, key=score)
            mine, others, _ = score(best)
            if mine or not others or steal:
                return best
        if waits:
            return None
        groups = [i for i, shard in enumerate(waiting) if shard.builds]
        builder = [self.builder.get(waiting[i].chunk) if waiting[i].chunk is not None else number for i in groups]
        own = [i for i, b in zip(groups, builder) if b == number]
        if own or slot.building:
            return own[0] if own else None
        unclaimed = [i for i, b in zip(groups, builder) if b is None]
        if unclaimed or steal:
            return (unclaimed or groups or [None])[0]
        return None

    def _lost(self, slot: Slot, actor, shard: Shard, exc: Exception, waiting: list[Shard]) -> None:
        """An actor died under a shard: replace it (once for all its shards) and send the shard again, first."""
        if slot.actor is actor:
            self._replace(slot)
        shard.attempts += 1
        if shard.attempts >= MAX_ATTEMPTS:
            self.failed = shard
            raise HarnessError(f"{self.label}: shard {shard.index} ({len(shard.rows)} rows from "
                               f"{shard.rows[0].row_id}) was lost with {MAX_ATTEMPTS} Ray actors in turn; "
                               f"the last: {exc}") from None
        waiting.insert(0, shard)

    # -- invariance ------------------------------------------------------------------------------

    def invariance(self, source: str, rows: Sequence[Row], batch_size: int, temperatures) -> "RemoteInvariance":
        """The invariance conditions of ``rows`` on ``source``'s scorer, scored on the pool's first actor."""
        self.prepare(source)
        return RemoteInvariance(self, source, rows, batch_size, temperatures)


class PoolChunkExecutor:
    """The pool's chunk executor of one row source: ``records(chunks)`` yields ``(index, records)`` as chunks
    finish, and ``variants`` builds a family's variant rows on the actors (``base.VariantBuildingChunks``)."""

    def __init__(self, pool: RayActorPool, source: str):
        self.pool, self.source = pool, source

    def records(self, chunks: Iterable[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        """Each chunk sent with its images waiting (``ChunksWithPixels.waiting``): the actors make the pixels."""
        waiting = getattr(chunks, "waiting", None)
        if waiting is not None:
            chunks = (waiting(i) for i in range(len(chunks)))
        return self.pool.records(self.source, chunks)

    def variants(self, family: str, rows: Sequence[Row], seed: int) -> list[Row]:
        """``family``'s variant rows of the source ``rows``, built on the actors (``RayActorPool.variants``)."""
        return self.pool.variants(self.source, family, rows, seed)

    def forget_images(self, digests) -> None:
        """Tell every actor's scorer to forget these images (``run.pipeline.variant_rows.VariantImages`` does, once no row
        waits for them: no shard in flight asks for them). Not waited for: an actor runs its calls in the order sent."""
        for slot in self.pool.slots:
            slot.actor.forget_images.remote(self.source, list(digests))


def _load_error(exc: Exception) -> str:
    """What a failed actor start says: the scorer's own exception where Ray kept it."""
    cause = _cause(exc)
    if cause is not exc:
        return f"{type(cause).__name__}: {cause}"
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


class RemoteInvariance:
    """``InvarianceRun.run`` on the pool's first actor (its references are computed there once)."""

    def __init__(self, pool: RayActorPool, source: str, rows: Sequence[Row], batch_size: int, temperatures):
        import ray

        self.pool, self.source, self.rows = pool, source, ray.put(list(rows))
        self.batch_size, self.temperatures = batch_size, temperatures

    def run(self, condition: str) -> dict:
        actor = self.pool.slots[0].actor
        try:
            return self.pool.get(actor.invariance.remote(self.source, condition, self.rows, self.batch_size,
                                                          self.temperatures))
        except ClusterLost:
            raise
        except Exception as exc:
            raise _cause(exc) from None
