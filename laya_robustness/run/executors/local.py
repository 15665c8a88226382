"""The executors that score a run's chunks of rows in this process: one chunk after another (``LocalExecutor``, the
default), or several chunks side by side on threads (``ConcurrentExecutor``: a served model's requests in flight
together). ``executor_for`` picks one for a scoring; the Ray pool's executor is ``ray_pool.SourceExecutor``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterable, Iterator, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.executors.base import forget_images
from laya_robustness.run.scoring import Scoring
from laya_robustness.scoring.base import capabilities


class LocalExecutor:
    """Scores chunks of rows in this process, one after another (``--executor local``, the default)."""

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


class ConcurrentExecutor:
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


def executor_for(scoring: Scoring):
    """The executor of a scoring: concurrent requests for a served model, else this process, chunk by chunk."""
    if capabilities(scoring.scorer).answers_in_text:
        return ConcurrentExecutor(scoring, capabilities(scoring.scorer).concurrency)
    return LocalExecutor(scoring)


