"""``--executor local`` (the default): a run's rows scored in this process (``LocalExecutor``), with the scorers
``ScorerSource.scorer`` loads once per device. Its planned cells are scored as one stream (``local_stream``), a cell
asked alone chunk after chunk (``SequentialChunkExecutor``), the next chunk made while one is scored; a served
model's chunks several side by side on threads (``ConcurrentChunkExecutor``: its requests in flight together);
``chunk_executor_for`` picks one for a scoring.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Iterable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.executors.base import ChunkExecutor, ScorerSource, alone, forget_images, none_held
from laya_robustness.run.executors.local_stream import LocalStream
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.prefetch import chunks_ahead
from laya_robustness.scoring.base import capabilities


class LocalExecutor:
    """Scores a run's rows in this process, cell after cell, with the scorers ``scorers`` (the run's
    ``run.scorers.ScorerPool``) loads here once per device (``ScorerSource.scorer``): it streams the run's planned cells
    (``run.executors.local_stream``: the next cell built while one is scored), builds variant images here and reports
    no executor block."""

    streams = True
    builds_variants = holds_scorers = False
    cluster = None
    world = sharing_world = staticmethod(alone)
    identities = staticmethod(none_held)  # the scorers are the pool's, loaded here

    def __init__(self, scorers: ScorerSource):
        self.scorers = scorers

    def connect(self) -> None:
        """Nothing to reach: the rows are scored here."""

    def scoring(self, device: str, source: str) -> Scoring:
        """The run's ``Scoring`` of ``source`` rows on ``device``: its scorer, path and temperatures."""
        s = self.scorers.settings
        return Scoring(self.scorers.scorer(device, source), s.scoring_path, s.temperatures)

    def chunk_executor(self, device: str, source: str) -> ChunkExecutor:
        """This process's executor of ``source`` rows on ``device`` (``chunk_executor_for``)."""
        return chunk_executor_for(self.scoring(device, source))

    def identity(self, device: str, source: str) -> dict:
        """The identity of the scorer loaded here."""
        return dict(getattr(self.scorers.scorer(device, source), "identity", {}))

    def invariance_run(self, device: str, source: str, rows: Sequence[Row], batch_size: int, temperatures):
        """The invariance conditions of ``rows`` on the scorer loaded here."""
        from laya_robustness.run.pipeline.invariance import invariance_run

        return invariance_run(self.scorers.scorer(device, source), rows, batch_size, temperatures)

    def stream(self, device: str, source: str, keys, plan_of) -> LocalStream | None:
        """The cells ``keys`` of ``source`` rows on ``device`` scored here one after another, each next one built while
        one is scored (``LocalStream``), where the chunks are scored one after another; None where the chunk
        executor scores them its own way (a served model's in flight together, a subclass's), cell by cell."""
        executor = self.chunk_executor(device, source)
        return LocalStream(executor.scoring, keys, plan_of) if type(executor) is SequentialChunkExecutor else None

    def meta(self, device: str) -> None:
        """None: the reports carry no executor block for a run scored in this process."""
        return None

    def close(self) -> None:
        """Nothing to let go: the scorers stay with the run."""


class SequentialChunkExecutor:
    """Scores chunks of rows in this process, one after another."""

    def __init__(self, scoring: Scoring):
        self.scoring = scoring

    def records(self, chunks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        """``(index, records)`` of each chunk as it is scored; another executor may yield them in any order. The
        next chunks' pixels are made while this one is scored (``ChunksWithPixels.ahead``)."""
        ahead = getattr(chunks, "ahead", None)
        chunks = ahead() if ahead is not None else iter(chunks)
        try:
            index = 0
            for rows in chunks:  # not enumerate: its cached (index, rows) pair would keep a scored chunk's pixels
                records = self.scoring.records(rows)
                del rows  # the chunk's pixels go before the next chunk is given its own
                yield index, records
                index += 1
        finally:  # stopped early: the chunks made ahead are let go, and their thread with them
            getattr(chunks, "close", lambda: None)()

    def forget_images(self, digests: Iterable[str]) -> None:
        """Let the scorer forget these images, where it can (``forget_images``)."""
        forget_images(self.scoring.scorer, digests)


class ConcurrentChunkExecutor:
    """Scores chunks on ``workers`` threads (a served model's requests in flight together), yielding each chunk as
    it finishes. The next chunks' pixels are made here while the threads score: at most ``workers`` chunks plus
    ``chunks_ahead()`` (at least one) are in hand at once, whatever the number of chunks. When one fails, no other
    is started, those in flight are waited for and yielded if they succeeded (so they are journaled), and then the
    first error propagates."""

    def __init__(self, scoring: Scoring, workers: int):
        self.scoring, self.workers = scoring, workers

    def records(self, chunks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="laya-requests")
        running: dict[Future, int] = {}
        feed = ((index, chunks[index]) for index in range(len(chunks)))  # not enumerate: see records above
        room = self.workers + max(1, chunks_ahead())
        error = None
        try:
            while True:
                while error is None and len(running) < room and self._submit(pool, feed, running):
                    pass
                if not running:
                    break
                for future in wait(running, return_when=FIRST_COMPLETED).done:
                    index = running.pop(future)
                    if future.exception() is None:
                        yield index, future.result()
                    else:
                        error = error or future.exception()
            if error is not None:
                raise error
        finally:  # an interrupted run does not wait for the requests not yet sent
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, pool: ThreadPoolExecutor, feed: Iterator, running: dict) -> bool:
        """Send the next chunk (its pixels made now) to be scored; False when there is none."""
        for index, rows in feed:
            running[pool.submit(self.scoring.records, rows)] = index
            return True
        return False

    def forget_images(self, digests: Iterable[str]) -> None:
        """Let the scorer forget these images, where it can (``forget_images``)."""
        forget_images(self.scoring.scorer, digests)


def chunk_executor_for(scoring: Scoring) -> ChunkExecutor:
    """The chunk executor of a scoring: concurrent requests for a served model, else one chunk after another."""
    if capabilities(scoring.scorer).answers_in_text:
        return ConcurrentChunkExecutor(scoring, capabilities(scoring.scorer).concurrency)
    return SequentialChunkExecutor(scoring)
