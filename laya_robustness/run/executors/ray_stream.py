"""A run's cells scored as one stream on a Ray pool (``--executor ray``).

The run says which cells its checks will ask for, in order (``GateRun.plan``). When the first is asked for, the
pool's actors start on it and go on with the next cells' shards (building their variants, then scoring their
chunks) while a cell's last chunks finish, so no actor idles at a cell's end and a small cell does not keep most
of them idle; each caller waits only for its own cell (a cell asked out of order goes first). What runs ahead is
bounded by the pool's lookahead: a later cell is started (its rows built or sent to be built) only when fewer than
``LOOKAHEAD`` shards per actor wait, so the front end holds the rows of a few cells, not of the run.

Each cell keeps the local run's chunks, batches and records (``run.cells.CellWork``): only the order in which
chunks reach the actors changes. Every chunk is journaled as it arrives, so a run stopped (Ctrl-C, ``-x``, a lost
cluster) leaves a journal ``--resume`` takes up, cells scored ahead included. A shard whose scorer raised fails its
own cell only: the stream sends the others again and goes on.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.cells import CellPlan, CellProgress, CellWork
from laya_robustness.run.executors.ray_pool import RayActorPool, Shard, SourceExecutor

BUILD, SCORE = "build", "score"


class StreamedCell:
    """One planned cell in the stream: its plan once started, the groups its variants are built in, its work
    once its rows are known, its shards waiting to be sent and in flight, and the error that ended it."""

    def __init__(self, number: int, key: tuple):
        self.number, self.key = number, key
        self.plan: CellPlan | None = None
        self.groups: list[Sequence[Row]] = []
        self.built: dict[int, list[Row]] = {}
        self.work: CellWork | None = None
        self.unsent: list[Shard] = []
        self.sent: dict[object, Shard] = {}
        self.error: BaseException | None = None

    @property
    def over(self) -> bool:
        return self.error is not None or (self.work is not None and self.work.scoring.done)

    def fail(self, exc: BaseException) -> None:
        self.error, self.unsent = exc, []
        if self.work is not None:
            self.work.close()


class RayStream:
    """The cells ``keys`` of ``source`` rows, scored on ``pool`` as one stream; ``plan_of(key)`` gives a cell's
    ``CellPlan`` when the stream starts it. ``records(key, progress)`` waits for one cell."""

    def __init__(self, pool: RayActorPool, source: str, keys: Sequence[tuple], plan_of: Callable[[tuple], CellPlan]):
        self.pool, self.source, self.plan_of = pool, source, plan_of
        self.cells = [StreamedCell(i, key) for i, key in enumerate(dict.fromkeys(keys))]
        self.by_key = {cell.key: cell for cell in self.cells}
        self.started: list[StreamedCell] = []
        self.waited: StreamedCell | None = None
        self._results: Iterator | None = None

    def records(self, key: tuple, progress: CellProgress) -> tuple[Sequence[Row], list[Record]]:
        """The rows and records of cell ``key``, once all its chunks are scored (its progress shown while it is
        waited for); the exception that ended it, if one did. A cell the plan did not name joins the stream now."""
        if key not in self.by_key:
            self.by_key[key] = StreamedCell(len(self.cells), key)
            self.cells.append(self.by_key[key])
        cell = self.waited = self.by_key[key]
        if cell.plan is None and cell.error is None:
            self._start(cell)
        shown = cell.over
        while not cell.over:
            if cell.work is not None and not shown:
                cell.work.show(progress)
                shown = True
            if not self._step():
                raise RuntimeError(f"the stream of {self.source} cells ended before {key} was scored")
        self.waited = None
        if cell.error is not None:
            raise cell.error
        return cell.work.rows, cell.work.scoring.records()

    # -- the feed the pool takes shards from ------------------------------------------------------

    def take(self, n: int) -> list[Shard]:
        """Up to ``n`` shards to send: the waited cell's first, then the started cells' in plan order, then those
        of cells started now, in plan order."""
        out: list[Shard] = []
        order = ([self.waited] if self.waited is not None else []) + self.started
        for cell in order:
            self._send(cell, n - len(out), out)
        for cell in self.cells:
            if len(out) >= n:
                break
            if cell.plan is None and cell.error is None:
                self._start(cell)
                self._send(cell, n - len(out), out)
        return out

    def _send(self, cell: StreamedCell, n: int, out: list[Shard]) -> None:
        while cell.unsent and n > 0:
            shard = cell.unsent.pop(0)
            cell.sent[shard.index] = shard
            out.append(shard)
            n -= 1

    # -- cells ------------------------------------------------------------------------------------

    def _start(self, cell: StreamedCell) -> None:
        """Plan the cell: its variants sent to be built in groups, or its rows' chunks sent to be scored."""
        self.started.append(cell)
        try:
            cell.plan = plan = self.plan_of(cell.key)
            if plan.build is not None:
                family, rows, seed = plan.build
                cell.groups = self.pool.variant_groups(rows)
                cell.unsent = [Shard((cell.number, BUILD, i), self.source, group, "variants", (family, seed))
                               for i, group in enumerate(cell.groups)]
                if not cell.groups:
                    self._scoring(cell, [])
            else:
                self._scoring(cell, list(plan.rows))
        except Exception as exc:  # the rows could not be built: the cell's error, told to whoever waits for it
            cell.fail(exc)

    def _scoring(self, cell: StreamedCell, rows: list[Row]) -> None:
        cell.work = cell.plan.start(rows)
        chunks = cell.work.scoring.chunks()
        cell.unsent += [Shard((cell.number, SCORE, i), self.source, chunks.waiting(i)) for i in range(len(chunks))]
        if cell.work.scoring.done:
            cell.work.close()

    def _deliver(self, index: tuple, result: list) -> None:
        number, kind, i = index
        cell = self.cells[number]
        cell.sent.pop(index, None)
        if cell.error is not None:
            return
        try:
            if kind == BUILD:
                cell.built[i] = result
                if len(cell.built) == len(cell.groups):
                    rows = [row for j in range(len(cell.groups)) for row in cell.built[j]]
                    cell.built = {}
                    self._scoring(cell, rows)
            else:
                cell.work.scoring.finish(i, result)
                if cell.work.scoring.done:
                    cell.work.close()
        except Exception as exc:
            cell.fail(exc)

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
            for cell in self.started:
                if failed is not None and failed.index[0] == cell.number:
                    cell.fail(exc)
                else:
                    cell.unsent[:0] = sorted(cell.sent.values(), key=lambda s: s.index[2])
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
        for cell in self.started:
            if cell.work is not None:
                cell.work.close()


def stream_of(executor, keys: Sequence[tuple], plan_of: Callable[[tuple], CellPlan]) -> RayStream | None:
    """The cells ``keys`` (and any other asked for later) scored as one stream on ``executor``'s pool, or None where
    the executor scores in this process (a local run scores its cells one after another: a stream gains nothing)."""
    if not isinstance(executor, SourceExecutor):
        return None
    return RayStream(executor.pool, executor.source, keys, plan_of)
