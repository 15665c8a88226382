"""A run's cells scored here as one stream (``--executor local``: ``LocalExecutor.stream``), so the device does not wait
between cells either: while a chunk is scored, the next one is made on the prefetch thread (``run.pipeline.prefetch``),
and at a cell's last chunk that is the next planned cell's rows (its variants built) with its first chunk's pixels.

The cells are scored one after another in the run's plan (``GateRun.plan``); a cell asked out of plan order goes
first, the planned ones after it follow. Each cell keeps the local run's chunks, batches and records
(``run.pipeline.cell_scoring.CellWork``), each chunk journaled as it is scored, in this thread: the prefetch thread builds rows
and makes pixels, and touches neither the journal nor the scorer. An error (a cell's scorer, its build, Ctrl-C) ends
the stream's thread before it propagates, and the next cell asked starts it again; a cell built ahead and never
scored lets its images go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.pipeline.cell_scoring import CellBuildError, CellPlan, CellProgress, CellWork
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.image_store import rows_with_pixels
from laya_robustness.run.pipeline.journal import row_key
from laya_robustness.run.pipeline.prefetch import made_ahead


@dataclass
class Made:
    """One step of the stream, made on the prefetch thread: a cell's first step brings its ``work`` (no rows in it
    yet), ``rows`` and local-run ``chunks``; each chunk with rows the journal lacks brings those rows' ``positions``
    and ``pixels`` (the rows with their pixels); ``last`` ends the cell; ``error``: its rows could not be built."""

    key: tuple
    work: CellWork | None = None
    rows: list[Row] | None = None
    chunks: list[list[int]] | None = None
    positions: list[int] | None = None
    pixels: list[Row] | None = None
    last: bool = True
    error: BaseException | None = None

    def taken(self) -> list[Row]:
        """The pixels, no longer held here (the stream's step goes on holding nothing of the chunk)."""
        pixels, self.pixels = self.pixels, None
        return pixels


class LocalStream:
    """The cells ``keys`` of one row source, scored with ``scoring`` here as one stream; ``plan_of(key)`` gives a
    cell's ``CellPlan`` (its rows built) on the prefetch thread. ``records(key, progress)`` scores one cell."""

    def __init__(self, scoring: Scoring, keys: Sequence[tuple], plan_of: Callable[[tuple], CellPlan]):
        self.scoring, self.plan_of = scoring, plan_of
        self.left = list(dict.fromkeys(keys))  # planned cells not scored yet, in plan order
        self.order: list[tuple] = []  # the cells the running pipeline makes, the one being scored first
        self.pipeline: Iterator[Made] | None = None
        self.current: CellWork | None = None

    def records(self, key: tuple, progress: CellProgress) -> tuple[Sequence[Row], list[Record]]:
        """The rows and records of cell ``key``, scored now (its progress shown); the error that ended it, if one
        did, once the stream's thread has ended."""
        self.left = [k for k in self.left if k != key]  # asked now: not built ahead again, even if it fails
        if self.pipeline is None or self.order[:1] != [key]:
            self._start([key, *self.left])
        try:
            work = self._score(progress)
        except BaseException:
            self._stop()
            raise
        self.order.pop(0)
        return work.rows, work.scoring.records()

    def _score(self, progress: CellProgress) -> CellWork:
        """Score the pipeline's next cell, chunk by chunk, each journaled as it is scored."""
        index = 0
        while True:
            made = next(self.pipeline)
            if made.error is not None:
                raise CellBuildError(made.error)
            if made.work is not None:
                self._begin(made, progress)
            if made.pixels is not None:
                self._check(index, made.positions)
                records = self.scoring.records(made.taken())
                self.current.scoring.finish(index, records)
                index += 1
            if made.last:
                work, self.current = self.current, None
                work.close()
                return work

    def _begin(self, made: Made, progress: CellProgress) -> None:
        """A cell's rows arrived: its chunks are cut (the journal's rows taken at once) and its progress shown."""
        self.current = made.work
        self.current.extend(made.rows, made.chunks)
        self.current.finished_rows()
        self.current.show(progress)

    def _check(self, index: int, positions: list[int]) -> None:
        pending = self.current.scoring.pending[index][0]
        if pending != positions:
            raise RuntimeError(f"the stream made the pixels of rows {positions[:3]}... where chunk {index} holds "
                               f"rows {pending[:3]}...")

    def _made(self, keys: Sequence[tuple]) -> Iterator[Made]:
        """Each cell's steps in turn (on the prefetch thread): its rows built, then its chunks' pixels."""
        for key in keys:
            try:
                plan = self.plan_of(key)
                rows = list(plan.rows)
                chunks, work = plan.chunks(rows), plan.work()
            except Exception as exc:  # noqa: BLE001  (raised where the cell is asked for, as a local run raises it)
                yield Made(key, error=exc)
                continue
            missing = unjournaled(work.scoring.journal, rows, chunks)
            yield from _steps(key, work, rows, chunks, missing)

    def _start(self, order: list[tuple]) -> None:
        self._stop()
        self.order = order
        self.pipeline = made_ahead(self._made(list(order)), dropped=_let_go)  # a copy: ``order`` loses its head

    def _stop(self) -> None:
        """End the pipeline (its thread with it) and the cell being scored."""
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline, self.order = None, []
        if self.current is not None:
            self.current.close()
            self.current = None

    def close(self) -> None:
        """Stop: the thread ends, the cells started let their images go; what was journaled stays."""
        self._stop()


def _steps(key: tuple, work: CellWork, rows: list[Row], chunks: list[list[int]],
           missing: list[list[int]]) -> Iterator[Made]:
    """A cell's steps: its rows with its first chunk, then one step per chunk with rows the journal lacks."""
    if not missing:
        yield Made(key, work, rows, chunks)
    for n, positions in enumerate(missing):
        first = n == 0
        yield Made(key, work if first else None, rows if first else None, chunks if first else None, positions,
                   rows_with_pixels([rows[i] for i in positions]), last=n == len(missing) - 1)


def unjournaled(journal, rows: Sequence[Row], chunks: Sequence[Sequence[int]]) -> list[list[int]]:
    """The positions of each chunk's rows the journal does not know, for every chunk with any (the pending chunks
    ``JournaledCell.extend`` will cut)."""
    keys = [row_key(journal.config, row) for row in rows]
    out = [[i for i in chunk if keys[i] not in journal.known] for chunk in chunks]
    return [positions for positions in out if positions]


def _let_go(made: Made) -> None:
    """A cell built ahead and never scored: its images go (``CellWork.close``)."""
    if made.work is not None:
        made.work.images.add(made.rows)
        made.work.close()
