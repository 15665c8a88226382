"""What every executor is: ``records(chunks)`` yields ``(index, records)`` of each chunk of rows as it is scored, in
any order (each chunk scored in one ``Scoring.records`` call, so its batches and its records are a local run's),
and ``forget_images(digests)`` lets its scorers forget images no row still needs (``run.variants``)."""

from __future__ import annotations

from typing import Iterable, Iterator, Protocol, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.scoring.base import capabilities


class Executor(Protocol):
    """Where a run's rows are scored: this process (``local``), threads of it, or a pool of Ray actors."""

    def records(self, chunks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        """``(index, records)`` of each chunk as it finishes."""

    def forget_images(self, digests: Iterable[str]) -> None:
        """No row still needs these images: let the scorers forget them."""


def forget_images(scorer, digests: Iterable[str]) -> None:
    """Tell ``scorer`` to forget these images where it can (``forget_images``: a scorer that keeps none has none)."""
    if capabilities(scorer).forget_images:
        scorer.forget_images(list(digests))
