"""Which waiting shard a free actor of the Ray pool takes (``RayActorPool._dispatch``): chunks to score before
groups to build, a group never queued behind a chunk being scored, a chunk queued behind one only when no actor
is building, groups in order, a chunk to the actor whose images it scored first among several, a chunk's groups
built by the actor that claimed the chunk, which then scores it. In this process:
the actors are stand-ins that note what they are sent."""

from types import SimpleNamespace

from laya_robustness.run.executors.ray_pool import (
    BUILDING_CHUNKS_PER_ACTOR,
    GROUPS_PER_CHUNK,
    HOME_CLUSTERS,
    PIPELINE,
    RayActorPool,
    Shard,
    Slot,
    placement_stores,
)
from laya_robustness.run.pipeline.variant_rows import expected_chunks
from laya_robustness.scoring.cache import ByteLRU


class NotingActor:
    """An actor handle whose ``method.remote(source, rows, *args)`` notes ``(actor, method, shard name)``."""

    def __init__(self, number: int, sent: list):
        self.number, self.sent = number, sent

    def __getattr__(self, method: str):
        def remote(source, rows, *args):
            self.sent.append((self.number, method, rows[0].name))
            return object()

        return SimpleNamespace(remote=remote)


def _pool(n_actors: int) -> tuple[RayActorPool, list]:
    sent: list = []
    pool = object.__new__(RayActorPool)  # no cluster: only the dispatching state
    pool.home, pool.builder = placement_stores(n_actors)
    pool.slots = [Slot(i, NotingActor(i, sent), ready=None) for i in range(n_actors)]
    return pool, sent


def _chunk(name: str, clusters=("a",)) -> Shard:
    return Shard(name, "rows", [SimpleNamespace(cluster=c, name=name) for c in clusters])


def _group(name: str, chunk=None) -> Shard:
    return Shard(name, "rows", [SimpleNamespace(cluster=f"src-{name}", name=name)], "variants", ("rotation", 0, True),
                 chunk=chunk)


def _remember(store: ByteLRU, entries: dict) -> None:
    for key, number in entries.items():
        store.put(key, number, nbytes=1)


def _finish(pool: RayActorPool, number: int, builds: bool) -> None:
    slot = pool.slots[number]
    slot.in_flight -= 1
    slot.building -= builds


def test_an_idle_actor_scores_before_it_builds_and_a_group_never_waits_behind_a_chunk():
    pool, sent = _pool(2)
    waiting = [_group("g0"), _group("g1"), _chunk("c0"), _group("g2")]
    pool._dispatch(waiting, {})
    # actor 0 takes the chunk; actor 1 builds g0 then g1 (in order); actor 0, scoring, takes no group
    assert sent == [(0, "records", "c0"), (1, "variants", "g0"), (1, "variants", "g1")]
    assert [s.index for s in waiting] == ["g2"]
    assert (pool.slots[0].in_flight, pool.slots[0].building) == (1, 0)
    assert (pool.slots[1].in_flight, pool.slots[1].building) == (PIPELINE, PIPELINE)


def test_a_chunk_waits_for_a_builder_rather_than_queue_behind_a_chunk_being_scored():
    pool, sent = _pool(2)
    pool._dispatch([_chunk("c0"), _group("g0"), _group("g1")], {})
    waiting = [_chunk("c1")]
    pool._dispatch(waiting, {})
    assert [s.index for s in waiting] == ["c1"] and len(sent) == 3  # held: actor 1 builds, so is free sooner
    _finish(pool, 1, builds=True)
    pool._dispatch(waiting, {})
    assert sent[-1] == (1, "records", "c1") and not waiting  # behind one group, not behind a chunk


def test_a_chunk_is_queued_behind_a_chunk_when_no_actor_builds():
    pool, sent = _pool(2)
    waiting = [_chunk(f"c{i}") for i in range(5)]
    pool._dispatch(waiting, {})
    assert sorted(number for number, _, _ in sent) == [0, 0, 1, 1]  # PIPELINE chunks each
    assert [s.index for s in waiting] == ["c4"]


def test_no_actor_takes_a_group_while_every_actor_is_scoring():
    pool, sent = _pool(2)
    pool._dispatch([_chunk("c0"), _chunk("c1")], {})
    waiting = [_group("g0")]
    pool._dispatch(waiting, {})
    assert len(sent) == 2 and [s.index for s in waiting] == ["g0"]
    _finish(pool, 0, builds=False)
    pool._dispatch(waiting, {})
    assert sent[-1] == (0, "variants", "g0")


def test_among_chunks_an_actor_takes_the_one_whose_images_it_scored_first():
    pool, sent = _pool(2)
    _remember(pool.home, {"x": 1, "y": 0})
    waiting = [_chunk("cx", ("x", "x")), _chunk("cy", ("y", "y"))]
    pool._dispatch(waiting, {})
    assert sorted(sent) == [(0, "records", "cy"), (1, "records", "cx")]


def test_an_actor_that_builds_a_group_becomes_its_images_home():
    pool, sent = _pool(2)
    pool._dispatch([_chunk("c0", ("src-g0",))], {})  # actor 0 scores src-g0 first
    pool._dispatch([_group("g0")], {})  # actor 1, idle, builds g0
    assert sent[1] == (1, "variants", "g0") and pool.home.get("src-g0") == 1


def test_the_groups_of_a_chunk_are_built_by_the_actor_that_claimed_it_and_it_scores_the_chunk():
    pool, sent = _pool(2)
    waiting = [_group(f"a{i}", chunk=0) for i in range(3)] + [_group(f"b{i}", chunk=1) for i in range(2)]
    pool._dispatch(waiting, {})
    # actor 0 claims chunk 0 (and takes its next group as well), actor 1 claims chunk 1
    assert sorted(sent) == [(0, "variants", "a0"), (0, "variants", "a1"), (1, "variants", "b0"), (1, "variants", "b1")]
    assert [s.index for s in waiting] == ["a2"]
    _finish(pool, 1, builds=True)
    _finish(pool, 1, builds=True)
    _finish(pool, 0, builds=True)
    pool._dispatch(waiting, {})  # actor 1 is idle, but a2 is actor 0's to build, and actor 0 has room
    assert sent[-1] == (0, "variants", "a2") and not waiting
    _finish(pool, 0, builds=True)
    _finish(pool, 0, builds=True)
    # the rows of chunks 0 (a0-a2) and 1 (b0, b1) are in: each is scored by the actor that built it
    waiting = [_chunk("c1", ("src-b0", "src-b1")), _chunk("c0", ("src-a0", "src-a1", "src-a2"))]
    pool._dispatch(waiting, {})
    assert sorted(sent[-2:]) == [(0, "records", "c0"), (1, "records", "c1")]


def test_an_idle_actor_builds_a_chunk_no_actor_claimed_before_it_takes_another_actors_chunk():
    pool, sent = _pool(2)
    _remember(pool.home, {"src-a0": 0})
    pool.slots[0].in_flight = pool.slots[0].building = 1  # actor 0 builds
    waiting = [_chunk("c0", ("src-a0",)), _group("b0", chunk=1)]
    pool._dispatch(waiting, {})
    # actor 1 builds the unclaimed chunk; actor 0 takes its own chunk behind its group
    assert sorted(sent) == [(0, "records", "c0"), (1, "variants", "b0")] and not waiting


def test_an_idle_actor_with_nothing_of_its_own_takes_another_actors_work_rather_than_wait():
    pool, sent = _pool(2)
    _remember(pool.builder, {0: 0})
    pool.slots[0].in_flight = pool.slots[0].building = PIPELINE  # actor 0 has no room
    waiting = [_group("a3", chunk=0)]
    pool._dispatch(waiting, {})
    assert sent == [(1, "variants", "a3")]
    _remember(pool.home, {"src-a0": 0})
    waiting = [_chunk("c0", ("src-a0",))]
    _finish(pool, 1, builds=True)
    pool._dispatch(waiting, {})
    assert sent[-1] == (1, "records", "c0")


def test_what_the_pool_remembers_of_homes_and_builders_stays_bounded_whatever_the_number_of_rows():
    pool, sent = _pool(2)
    again = "photo-0"  # in every chunk: scored again and again, so remembered however many others come
    for i in range(70):  # 70,000 image clusters, more than HOME_CLUSTERS
        pool._dispatch([_chunk(f"c{i}", [again] + [f"im-{i}-{j}" for j in range(1000)])], {})
        _finish(pool, sent[-1][0], builds=False)
    assert len(pool.home) == HOME_CLUSTERS
    assert again in pool.home and "im-69-999" in pool.home and "im-0-0" not in pool.home
    claimed = BUILDING_CHUNKS_PER_ACTOR * 2 + 10
    for chunk in range(claimed):
        pool._dispatch([_group(f"g{chunk}", chunk=chunk)], {})
        _finish(pool, sent[-1][0], builds=True)
    assert pool.builder.keys() == list(range(claimed - BUILDING_CHUNKS_PER_ACTOR * 2, claimed))


def test_a_cells_source_rows_are_cut_into_groups_by_the_chunk_their_variants_land_in():
    rows = list(range(11))
    chunks = expected_chunks("rotation", len(rows), 8)  # 2 variant rows a row: 4 source rows a chunk
    assert chunks == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    groups = RayActorPool.variant_groups(rows, chunks)
    assert [chunk for chunk, _ in groups] == [0] * GROUPS_PER_CHUNK + [1] * GROUPS_PER_CHUNK + [2] * 3
    assert [row for _, group in groups for row in group] == rows
    wide = RayActorPool.variant_groups(list(range(10)), [0] * 10)
    assert [len(g) for _, g in wide] == [3, 3, 3, 1]


def test_an_actor_that_makes_chunks_ahead_builds_and_takes_a_chunk_while_it_scores_one():
    """With a chunk made ahead (the actor runs calls side by side), nothing waits behind the chunk being scored: the
    scoring actor takes a group of the next chunk to build, then the next chunk, and no third chunk."""
    pool, sent = _pool(1)
    pool.ahead = 1
    pool._dispatch([_chunk("c0")], {})
    waiting = [_group("g0", chunk=1), _group("g1", chunk=1)]
    pool._dispatch(waiting, {})
    assert sent == [(0, "records", "c0"), (0, "variants", "g0"), (0, "variants", "g1")]
    assert pool.slots[0].in_flight == pool.room == PIPELINE + 1
    _finish(pool, 0, builds=True)
    _finish(pool, 0, builds=True)
    waiting = [_chunk("c1"), _chunk("c2")]
    pool._dispatch(waiting, {})
    assert sent[-1] == (0, "records", "c1") and [s.index for s in waiting] == ["c2"]  # one scored, one made ready
    assert (pool.slots[0].in_flight, pool.slots[0].building) == (2, 0)
