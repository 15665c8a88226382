"""``--executor local`` (the default): a run's rows scored in this process (``LocalExecutor``), with the scorers
``RunScorers.scorer`` loads once per device. Its chunks are scored one after another
(``SequentialChunkExecutor``), or several side by side on threads (``ConcurrentChunkExecutor``: a served model's
requests in flight together); ``chunk_executor_for`` picks one for a scoring.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.executors.base import ChunkExecutor, forget_images
from laya_robustness.run.scoring.chunks import Scoring
from laya_robustness.scoring.base import capabilities


class LocalExecutor:
    """Scores a run's rows in this process, cell after cell, with the scorers ``scorers`` (the run's
    ``run.scorers.RunScorers``) loads here once per device (``RunScorers.scorer``): it streams nothing, builds
    variant images here and reports no executor block."""

    streams = builds_variants = holds_scorers = False
    cluster = None

    def __init__(self, scorers):
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
        from laya_robustness.run.scoring.invariance import invariance_run

        return invariance_run(self.scorers.scorer(device, source), rows, batch_size, temperatures)

    def stream(self, device: str, source: str, keys, plan_of) -> None:
        """None: cells scored here one after another gain nothing from a stream."""
        return None

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
        """``(index, records)`` of each chunk as it is scored; another executor may yield them in any order."""
        index = 0
        for rows in chunks:  # not enumerate: its cached (index, rows) pair would keep a scored chunk's pixels
            records = self.scoring.records(rows)
            del rows  # the chunk's pixels go before the next chunk is given its own
            yield index, records
            index += 1

    def forget_images(self, digests: Iterable[str]) -> None:
        """Let the scorer forget these images, where it can (``forget_images``)."""
        forget_images(self.scoring.scorer, digests)


class ConcurrentChunkExecutor:
    """Scores chunks on ``workers`` threads (a served model's requests in flight together), yielding each chunk as
    it finishes. When one fails, the chunks not started are cancelled, those in flight are waited for and
    yielded if they succeeded (so they are journaled), and then the first error propagates."""

    def __init__(self, scoring: Scoring, workers: int):
        self.scoring, self.workers = scoring, workers

    def records(self, chunks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="laya-requests")
        try:
            futures = {pool.submit(self.scoring.records, rows): i for i, rows in enumerate(chunks)}
            error = None
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                if future.exception() is None:
                    yield futures[future], future.result()
                    continue
                error = error or future.exception()
                for other in futures:
                    other.cancel()
            if error is not None:
                raise error
        finally:  # an interrupted run does not wait for the requests not yet sent
            pool.shutdown(wait=True, cancel_futures=True)

    def forget_images(self, digests: Iterable[str]) -> None:
        """Let the scorer forget these images, where it can (``forget_images``)."""
        forget_images(self.scoring.scorer, digests)


def chunk_executor_for(scoring: Scoring) -> ChunkExecutor:
    """The chunk executor of a scoring: concurrent requests for a served model, else one chunk after another."""
    if capabilities(scoring.scorer).answers_in_text:
        return ConcurrentChunkExecutor(scoring, capabilities(scoring.scorer).concurrency)
    return SequentialChunkExecutor(scoring)
