"""One cell's scoring (a family on one dataset and device): its rows in the local run's chunks, journaled as they
are scored, its progress shown while a caller waits for it, and its variant images let go as its rows are done.
The same whether the cell is scored alone (``CellWork.score``) or in a stream of cells (``run.executors.ray_stream``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.pipeline.chunks import JournaledCell
from laya_robustness.run.pipeline.variant_rows import VariantImages

class CellBuildError(Exception):
    """A cell's rows could not be built (its variants, in the front end or on an actor): ``error`` is the builder's
    own exception, which the run raises as it is, as a local run does where it builds the rows before scoring."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


#: ``progress(total)`` -> a tracker with ``update(n)`` and ``close()`` (``run.gate_run.Progress`` of one cell).
CellProgress = Callable[[int], object]


class CellWork:
    """The scoring of one cell's ``rows`` (``run.pipeline.chunks.JournaledCell`` over ``chunks``), its variant images
    (``run.pipeline.variant_rows.VariantImages``) let go as rows are done. Progress is shown once a caller waits for the cell
    (``show``): a cell scored ahead of its test shows nothing until its test runs. A cell whose rows arrive as they
    are built starts ``complete=False``, is given them with ``extend`` and is told ``finished_rows`` after the last."""

    def __init__(self, rows: Sequence[Row], chunks: Sequence[Sequence[int]], journal, images: VariantImages,
                 complete: bool = True):
        self.images = images
        self.rows_done, self._tracker = 0, None
        self.scoring = JournaledCell(journal, rows, chunks, self._chunk_done, images.done, complete)
        self.closed = False

    @property
    def rows(self) -> list[Row]:
        return self.scoring.rows

    def extend(self, rows: Sequence[Row], chunks: Sequence[Sequence[int]]) -> None:
        """More of the cell's rows, and the chunks they make (positions in the whole cell)."""
        self.images.add(rows)
        self.scoring.extend(rows, chunks)

    def finished_rows(self) -> None:
        """No more rows will come."""
        self.scoring.complete = True

    def _chunk_done(self, n: int) -> None:
        self.rows_done += n
        if self._tracker is not None:
            self._tracker.update(n)

    def show(self, progress: CellProgress) -> None:
        """Show this cell's progress from now on (the rows already done counted at once)."""
        if self._tracker is None:
            self._tracker = progress(len(self.rows))
            self._tracker.update(self.rows_done)

    def close(self) -> None:
        """The cell is over (done, or stopped): close its progress and let every variant image go."""
        if self.closed:
            return
        self.closed = True
        if self._tracker is not None:
            self._tracker.close()
        self.images.all_done()

    def score(self, executor, progress: CellProgress) -> list[Record]:
        """Score the cell now on ``executor`` (``records(chunks)``, see ``run.pipeline.chunks.score_journaled``)."""
        self.show(progress)
        try:
            return self.scoring.score(executor)
        finally:
            self.close()


@dataclass
class CellPlan:
    """What a stream needs of one planned cell: its ``rows`` when they are known before scoring, or ``build``
    (family, source rows, seed) when the executor builds them, each built group made this process's own by
    ``adopt``; ``work()``, an empty ``CellWork`` (``complete=False``) for its rows; ``chunks(rows)``, the local
    run's chunks of the cell's whole rows, and ``chunk_rows``, their size where they are consecutive slices of
    that many rows (the batch path), so they can be cut as the rows arrive (None: once all have)."""

    key: tuple
    work: Callable[[], CellWork]
    chunks: Callable[[Sequence[Row]], list[list[int]]]
    chunk_rows: int | None = None
    rows: Sequence[Row] | None = None
    build: tuple | None = None
    adopt: Callable[[list[Row]], list[Row]] = list
