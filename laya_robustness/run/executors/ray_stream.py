"""A run's cells scored as one stream on a Ray pool (``--executor ray``: ``RayExecutor.stream``).

The run says which cells its checks will ask for, in order (``GateRun.plan``). When the first is asked for, the
pool's actors start on it and go on with the next cells' shards (building their variants, then scoring their
chunks) while a cell's last chunks finish, so no actor idles at a cell's end and a small cell does not keep most
of them idle; each caller waits only for its own cell (a cell asked out of order goes first). What runs ahead is
bounded by the pool's lookahead: a later cell is started (its rows built or sent to be built) only when fewer than
``LOOKAHEAD`` shards per actor wait, so the front end holds the rows of a few cells, not of the run.

Each cell keeps the local run's chunks, batches and records (``run.pipeline.cell_scoring.CellWork``): only the order in which
chunks reach the actors changes. Every chunk is journaled as it arrives, so a run stopped (Ctrl-C, ``-x``, a lost
cluster) leaves a journal ``--resume`` takes up, cells scored ahead included. A shard whose scorer raised fails its
own cell only: the stream sends the others again and goes on.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import PendingImage, Row
from laya_robustness.run.executors.ray_pool import FALLBACK_CHUNK_ROWS, RayActorPool, Shard
from laya_robustness.run.pipeline.cell_scoring import CellBuildError, CellPlan, CellProgress, CellWork
from laya_robustness.run.pipeline.chunks import consecutive_chunks
from laya_robustness.run.pipeline.variant_rows import VariantBuild, expected_chunks

BUILD, SCORE = "build", "score"
#: Chunks per actor whose variant images the stream keeps built ahead of their scoring, at most.
KEPT_CHUNKS_PER_ACTOR = 2


class StreamedCell:
    """One planned cell in the stream: its plan and work once started, the groups its variants are built in (those
    not sent yet, those back out of order, the next one its rows go on from), how many of its rows are in chunks,
    its shards waiting to be sent and in flight, and the error that ended it."""

    def __init__(self, number: int, key: tuple):
        self.number, self.key = number, key
        self.started = self.taken = False  # planned by the stream; its records handed to the run (then let go)
        self.plan: CellPlan | None = None
        self.work: CellWork | None = None
        self.groups: list[Sequence[Row]] = []
        self.group_chunks: list[int] = []  # the chunk each group's variant rows are expected to land in
        self.to_build: list[int] = []
        self.built: dict[int, list[Row]] = {}
        self.next_group = 0
        self.chunked = 0
        self.unsent: list[Shard] = []
        self.sent: dict[object, Shard] = {}
        self.error: BaseException | None = None
        self.building = False  # whether the error came while its rows were built

    @property
    def over(self) -> bool:
        return self.taken or self.error is not None or (self.work is not None and self.work.scoring.done)

    @property
    def has_rows(self) -> bool:
        """Whether all its rows are known (its progress can say how many)."""
        return self.work is not None and self.work.scoring.complete

    def kept_bytes(self) -> int:
        """Decoded bytes of the variant images Ray objects keep for its rows still to be scored."""
        waiting = {id(b): b for rows in self.built.values() for b in _builds(rows) if b.ref is not None}
        return sum(b.nbytes for b in waiting.values()) + (self.work.images.kept_bytes if self.work else 0)

    def fail(self, exc: BaseException, building: bool) -> None:
        self.error, self.unsent, self.to_build, self.sent, self.built = exc, [], [], {}, {}
        self.building = building
        if self.work is not None:
            self.work.close()


class RayStream:
    """The cells ``keys`` of ``source`` rows, scored on ``pool`` as one stream; ``plan_of(key)`` gives a cell's
    ``CellPlan`` when the stream starts it. ``records(key, progress)`` waits for one cell.

    A cell's variants are built in the groups of source rows ``RayActorPool.variant_groups`` cuts by the chunk their
    variant rows are expected to land in (``run.pipeline.variant_rows.expected_chunks``), so that one actor builds a chunk's
    rows and scores it. The variant images an actor builds are kept for the actor that scores them
    (``run.pipeline.variant_rows.VariantBuild``: in Ray's object store, so they are built once) while the images kept for
    rows not yet scored stay under ``KEPT_CHUNKS_PER_ACTOR`` chunks per actor (their bytes estimated from the groups
    built so far, at most half the cluster's object store): past that, a group waits to be built while chunks are being
    scored, and is built without keeping its images (rebuilt where scored) when none is."""

    def __init__(self, pool: RayActorPool, source: str, keys: Sequence[tuple], plan_of: Callable[[tuple], CellPlan]):
        self.pool, self.source, self.plan_of = pool, source, plan_of
        self.cells = [StreamedCell(i, key) for i, key in enumerate(dict.fromkeys(keys))]
        self.by_key = {cell.key: cell for cell in self.cells}
        self.active: list[StreamedCell] = []  # started cells whose records are not handed over yet
        self.waited: StreamedCell | None = None
        self._results: Iterator | None = None
        self.built_rows = self.built_bytes = 0  # variant rows built with their images kept, and those images' bytes
        self.store_cap = pool.object_store_bytes() // 2 or float("inf")

    def plan_more(self, keys: Sequence[tuple]) -> None:
        """Cells asked after those planned: they join the stream, after the cells it holds."""
        for key in keys:
            if key not in self.by_key:
                self.by_key[key] = StreamedCell(len(self.cells), key)
                self.cells.append(self.by_key[key])

    def records(self, key: tuple, progress: CellProgress) -> tuple[Sequence[Row], list[Record]]:
        """The rows and records of cell ``key``, once all its chunks are scored (its progress shown while it is
        waited for); the exception that ended it, if one did. A cell the plan did not name joins the stream now."""
        self.plan_more([key])
        cell = self.waited = self.by_key[key]
        if not cell.started:
            self._start(cell)
        shown = cell.over
        while not cell.over:
            if cell.has_rows and not shown:
                cell.work.show(progress)
                shown = True
            if not self._step():
                raise RuntimeError(f"the stream of {self.source} cells ended before {key} was scored")
        self.waited = None
        if cell.error is not None:
            raise CellBuildError(cell.error) if cell.building else cell.error
        if cell.taken:
            raise RuntimeError(f"the records of {key} were already handed over")
        rows, records = cell.work.rows, cell.work.scoring.records()
        cell.taken, cell.work, cell.plan = True, None, None  # the run keeps the records; the rows go
        self.active.remove(cell)
        return rows, records

    # -- the feed the pool takes shards from ------------------------------------------------------

    def take(self, n: int) -> list[Shard]:
        """Up to ``n`` shards to send: the chunks to score of the waited cell, then of the active cells in plan
        order; then their groups to build in the same order; then the shards of cells started now, in plan order."""
        out: list[Shard] = []
        order = ([self.waited] if self.waited is not None else []) + self.active
        for cell in order:
            self._send_chunks(cell, n - len(out), out)
        for cell in order:
            self._send_builds(cell, n - len(out), out)
        for cell in self.cells:
            if len(out) >= n:
                break
            if not cell.started:
                self._start(cell)
                self._send_chunks(cell, n - len(out), out)
                self._send_builds(cell, n - len(out), out)
        return out

    def _send_chunks(self, cell: StreamedCell, n: int, out: list[Shard]) -> None:
        while cell.unsent and n > 0:
            shard = cell.unsent.pop(0)
            cell.sent[shard.index] = shard
            out.append(shard)
            n -= 1

    def _send_builds(self, cell: StreamedCell, n: int, out: list[Shard]) -> None:
        while cell.to_build and n > 0:
            keep = self._room_to_keep()
            if keep is None:
                return
            i = cell.to_build.pop(0)
            family, _, seed = cell.plan.build
            shard = Shard((cell.number, BUILD, i), self.source, cell.groups[i], "variants", (family, seed, keep),
                          chunk=(cell.number, cell.group_chunks[i]))
            cell.sent[shard.index] = shard
            out.append(shard)
            n -= 1

    def _room_to_keep(self) -> bool | None:
        """Whether a group sent to be built now keeps its images (True), is built without keeping them (False: no
        room, and no chunk is being scored that would make room), or waits (None)."""
        if not self.built_bytes:  # nothing kept so far (no group back yet, or groups that make no new image)
            return True
        per_row = self.built_bytes / self.built_rows
        budget = min(KEPT_CHUNKS_PER_ACTOR * len(self.pool.slots) * self._chunk_rows() * per_row, self.store_cap)
        if sum(cell.kept_bytes() for cell in self.active) < budget:
            return True
        scoring = any(s.index[1] == SCORE for cell in self.active for s in [*cell.sent.values(), *cell.unsent])
        return None if scoring else False

    def _chunk_rows(self) -> int:
        return max((c.plan.chunk_rows or 0) for c in self.active if c.plan is not None) or FALLBACK_CHUNK_ROWS

    # -- cells ------------------------------------------------------------------------------------

    def _start(self, cell: StreamedCell) -> None:
        """Plan the cell: its variants sent to be built in groups, or its rows' chunks sent to be scored."""
        cell.started = True
        self.active.append(cell)
        try:
            cell.plan = plan = self.plan_of(cell.key)
            cell.work = plan.work()
            if plan.build is not None:
                family, rows, _ = plan.build
                chunks = expected_chunks(family, len(rows), plan.chunk_rows or FALLBACK_CHUNK_ROWS)
                groups = self.pool.variant_groups(rows, chunks)
                cell.groups, cell.group_chunks = [g for _, g in groups], [c for c, _ in groups]
                cell.to_build = list(range(len(cell.groups)))
                if not cell.groups:
                    self._rows_arrived(cell, [], last=True)
            else:
                self._rows_arrived(cell, list(plan.rows), last=True)
        except Exception as exc:  # the rows could not be built: the cell's error, told to whoever waits for it
            cell.fail(exc, building=True)

    def _rows_arrived(self, cell: StreamedCell, rows: list[Row], last: bool) -> None:
        """More of the cell's rows, in order: the chunks they complete are sent to be scored (every chunk once the
        last rows are in, where chunks are not consecutive slices)."""
        work, size = cell.work, cell.plan.chunk_rows
        work.extend(rows, [])
        total, chunks = len(work.rows), []
        if size:
            chunks = consecutive_chunks(cell.chunked, total, size, last)
            cell.chunked = chunks[-1][-1] + 1 if chunks else cell.chunked
        elif last:
            chunks = cell.plan.chunks(work.rows)
        first = len(work.scoring.pending)
        work.extend([], chunks)
        pending = work.scoring.chunks(first)
        cell.unsent += [Shard((cell.number, SCORE, first + i), self.source, pending.waiting(i))
                        for i in range(len(pending))]
        if last:
            work.finished_rows()
            if work.scoring.done:
                work.close()

    def _deliver(self, index: tuple, result: list) -> None:
        number, kind, i = index
        cell = self.cells[number]
        shard = cell.sent.pop(index, None)
        if cell.error is not None:
            return
        try:
            if kind == BUILD:
                if shard is not None and shard.args[2]:
                    self.built_rows += len(result)
                    self.built_bytes += sum(b.nbytes for b in {id(b): b for b in _builds(result)}.values())
                cell.built[i] = result
                while cell.next_group in cell.built:
                    rows = cell.plan.adopt(cell.built.pop(cell.next_group))
                    cell.next_group += 1
                    self._rows_arrived(cell, rows, last=cell.next_group == len(cell.groups))
            else:
                cell.work.scoring.finish(i, result)
                if cell.work.scoring.done:
                    cell.work.close()
        except Exception as exc:
            cell.fail(exc, building=kind == BUILD)

    # -- the pool's results -----------------------------------------------------------------------

    def _step(self) -> bool:
        """Take the next result the pool gives and deliver it to its cell; False once the pool has nothing left to
        score. A shard whose scorer raised fails its cell, and the shards in flight of the others are sent again;
        any other exception (a lost cluster, Ctrl-C) propagates with them put back to send."""
        if self._results is None:
            self._results = self.pool.results(self)
        try:
            index, result = next(self._results)
        except StopIteration:
            self._results = None
            return False
        except BaseException as exc:
            self._results = None
            failed = self.pool.failed
            for cell in self.active:
                if failed is not None and failed.index[0] == cell.number:
                    cell.fail(exc, building=failed.builds)
                else:
                    cell.unsent[:0] = sorted((s for s in cell.sent.values() if s.index[1] == SCORE),
                                             key=lambda s: s.index[2])
                    cell.to_build[:0] = sorted(s.index[2] for s in cell.sent.values() if s.index[1] == BUILD)
                    cell.sent = {}
            if failed is None:
                raise
            return True
        self._deliver(index, result)
        return True

    def close(self) -> None:
        """Stop: the shards in flight are cancelled, every started cell lets its images go."""
        if self._results is not None:
            self._results.close()
            self._results = None
        for cell in self.active:
            if cell.work is not None:
                cell.work.close()


def _builds(rows: Sequence[Row]) -> list:
    """The ``VariantBuild`` of each variant image of ``rows`` (one per image: the same build repeats)."""
    return [im.source.make for row in rows for im in row.images
            if isinstance(im, PendingImage) and isinstance(getattr(im.source, "make", None), VariantBuild)]
