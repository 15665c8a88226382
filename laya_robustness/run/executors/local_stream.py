"""A run's cells scored here as one stream (``--executor local``: ``LocalExecutor.stream``), so the device does not wait
between cells either: while a chunk is scored, the next one is made on the prefetch thread (``run.pipeline.prefetch``),
at a cell's last chunk the next planned cell's first chunk, and the next cell's rows (its variants) are built on a
thread of their own while the cell before it is scored, so a long build is not waited for at the cell's turn.

The cells are scored one after another in the run's plan (``GateRun.plan``); a cell asked out of plan order goes
first, the planned ones after it follow. Each cell keeps the local run's chunks, batches and records
(``run.pipeline.cell_scoring.CellWork``), each chunk journaled as it is scored, in this thread: the prefetch threads build
rows and make pixels, and touch neither the journal nor the scorer. An error (a cell's scorer, its build, Ctrl-C) ends
the stream's threads before it propagates, and the next cell asked starts it again; a cell built ahead and never
scored lets its images go.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.pipeline.cell_scoring import CellBuildError, CellPlan, CellProgress, CellWork
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.image_store import rows_with_pixels
from laya_robustness.run.pipeline.journal import row_key
from laya_robustness.run.pipeline.prefetch import ROWS_THREAD_NAME, chunks_ahead, made_ahead
from laya_robustness.run.pipeline.variant_rows import holds_images


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

    def plan_more(self, keys: Sequence[tuple]) -> None:
        """Cells asked after those planned: the stream goes on to them (from the next cell it starts on)."""
        self.left += [key for key in keys if key not in self.left]

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
        """Each cell's steps in turn (on the prefetch thread): its chunks' pixels, its rows built before on a thread
        of their own, one cell ahead (``_built``), so a cell whose build is long is not waited for between cells."""
        cells = made_ahead(self._built(keys), min(1, chunks_ahead()), _let_go_built, ROWS_THREAD_NAME)
        with closing(cells):  # stopped early: the rows thread ends with this one
            yield from self._cell_steps(cells)

    def _cell_steps(self, cells: Iterator[Built]) -> Iterator[Made]:
        for built in cells:
            if built.error is None and built.rows is None:  # a cell not built ahead: built now
                built = _build(built.key, self.plan_of)
            if built.error is not None:
                yield Made(built.key, error=built.error)
                continue
            missing = unjournaled(built.work.scoring.journal, built.rows, built.chunks)
            yield from _steps(built.key, built.work, built.rows, built.chunks, missing)

    def _built(self, keys: Sequence[tuple]) -> Iterator[Built]:
        """Each cell's rows built, in turn (a cell whose variant images are all held until it is scored,
        ``holds_images``, is left to be built when its turn comes: two of them are not held at once)."""
        for key in keys:
            yield Built(key) if holds_images(key[0]) else _build(key, self.plan_of)

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


@dataclass
class Built:
    """A cell's rows built (with its local-run ``chunks`` and its empty ``work``), the ``error`` its build raised,
    or neither: its build waits for its turn."""

    key: tuple
    rows: list[Row] | None = None
    chunks: list[list[int]] | None = None
    work: CellWork | None = None
    error: BaseException | None = None


def _build(key: tuple, plan_of: Callable[[tuple], CellPlan]) -> Built:
    """Cell ``key``'s rows, built now (``plan_of``), or the error that stopped them."""
    try:
        plan = plan_of(key)
        rows = list(plan.rows)
        return Built(key, rows, plan.chunks(rows), plan.work())
    except Exception as exc:  # noqa: BLE001  (raised where the cell is asked for, as a local run raises it)
        return Built(key, error=exc)


def _let_go_built(built: Built) -> None:
    """A cell built ahead whose chunks were never made: its images go."""
    if built.work is not None:
        _let_go(Made(built.key, built.work, built.rows))
