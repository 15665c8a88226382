"""What an executor is, at two levels. A run has one ``Executor`` (``--executor``, made by ``registry``): it declares
what it does (streams the run's cells, builds variant images where it scores, holds the scorers away from this
process) and gives, per (device, row source), a ``ChunkExecutor``: ``records(chunks)`` yields ``(index, records)``
of each chunk of rows as it is scored, in any order (each chunk scored in one ``Scoring.records`` call, so its
batches and its records are a local run's), and ``forget_images(digests)`` lets its scorers forget images no row
still needs (``run.pipeline.variant_rows``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.scoring.base import capabilities

if TYPE_CHECKING:
    from laya_robustness.run.pipeline.cell_scoring import CellPlan, CellProgress


class ChunkExecutor(Protocol):
    """Where the chunks of one row source are scored on one device: this process, threads of it, or Ray actors."""

    def records(self, chunks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, list[Record]]]:
        """``(index, records)`` of each chunk as it finishes."""

    def forget_images(self, digests: Iterable[str]) -> None:
        """No row still needs these images: let the scorers forget them."""


class VariantBuildingChunks(ChunkExecutor, Protocol):
    """The chunk executor of an executor that ``builds_variants``: it also builds a family's variant rows."""

    def variants(self, family: str, rows: Sequence[Row], seed: int) -> list[Row]:
        """``family``'s variant rows of the source ``rows``, in their order, their images built where they will be
        scored (they travel back as the recipes that build them)."""


class CellStream(Protocol):
    """The planned cells of one (device, source), scored as one stream: each caller waits for its own cell."""

    def records(self, key: tuple, progress: CellProgress) -> tuple[Sequence[Row], list[Record]]:
        """The rows and records of cell ``key`` once it is scored."""

    def plan_more(self, keys: Sequence[tuple]) -> None:
        """Cells the run will ask for after those planned (an xdist worker's next dataset): they join the plan."""

    def close(self) -> None:
        """Stop: what is in flight is cancelled; what was journaled stays."""


class ScorerSource(Protocol):
    """What an executor is made from (``registry.make_executor``; the run's ``run.scorers.ScorerPool``): the run's
    ``settings`` and ``models`` (``run.models.RunModels``), its scorers loaded in this process, and its memory of
    the scorers that failed to load (never retried)."""

    settings: Any
    models: Any

    def scorer(self, device: str, source: str = "rows") -> Any:
        """The scorer of ``source`` rows on ``device``, loaded here once (its identity kept by the pool)."""

    def raise_failed_load(self, device: str, source: str) -> None:
        """Raise the error of ``source``'s scorer on ``device`` if it failed to load earlier."""

    def load_failed(self, device: str, source: str, exc: Exception) -> Exception:
        """The harness error of ``source``'s scorer failing to load on ``device`` wherever the executor loads it,
        remembered so that it is not retried."""


class Executor(Protocol):
    """Where a run's rows are scored (``--executor``), made once per run from its ``ScorerSource``
    (``registry.make_executor``). What it does is declared, for the run to ask:

    ``streams``: the run's planned cells of each (device, source) are scored as one stream (``stream``), so the run
    says which cells its checks will ask for before the first is asked; ``builds_variants``: a pixel family's variant
    images are built where the rows are scored (its chunk executors are ``VariantBuildingChunks``);
    ``holds_scorers``: the scorers live elsewhere, so the run loads none in this process; ``cluster``: the cluster
    it scores on (its ``resources()`` say what it holds: gpu-marked tests count its GPUs), None for this process.
    Whether the ranks of a world run the run together, its class says (``world()``, ``sharing_world()``), asked
    before the run is made."""

    streams: bool
    builds_variants: bool
    holds_scorers: bool
    cluster: object | None

    @staticmethod
    def world() -> tuple[int, int] | None:
        """(rank, world size) where every rank of a world runs the run together: a rank other than 0 writes no
        reports, and each meets the others at the run's end; None where this process runs it alone."""

    @staticmethod
    def sharing_world() -> tuple[int, int] | None:
        """``world()`` where more than one rank shares the run: the ranks that do not write draw the reports'
        plots for the one that does; None otherwise."""

    def connect(self) -> None:
        """Reach where the rows are scored, before any test runs (an unreachable place: a ``HarnessError``)."""

    def chunk_executor(self, device: str, source: str) -> ChunkExecutor:
        """What scores ``source`` rows on ``device``, its scorer loaded once (a failed load: ``HarnessError``)."""

    def identity(self, device: str, source: str) -> dict:
        """The identity of the scorer of ``source`` rows on ``device``, wherever it is loaded."""

    def identities(self) -> dict[str, dict]:
        """The identities of the scorers it loaded away from this process, by identity key (returned, never
        written into the run's pool); none where the scorers are the pool's own (``ScorerSource.scorer``)."""

    def invariance_run(self, device: str, source: str, rows: Sequence[Row], batch_size: int, temperatures):
        """The invariance conditions of ``rows`` on the ``source`` scorer (``run(condition)`` -> its stats),
        run where the run's rows are scored."""

    def stream(self, device: str, source: str, keys: Sequence[tuple],
               plan_of: Callable[[tuple], CellPlan]) -> CellStream | None:
        """The cells ``keys`` of ``source`` rows on ``device`` scored as one stream (``plan_of(key)`` plans one);
        asked only where the executor ``streams``."""

    def meta(self, device: str) -> dict | None:
        """The reports' ``executor`` block for ``device`` (where and on what it scored); None for this process."""

    def close(self) -> None:
        """Let go of what the run used (actors, a connection); nothing for this process."""


def none_held() -> dict[str, dict]:
    """No identities held away from this process (``Executor.identities`` of an executor that scores with the
    scorers the pool loads here)."""
    return {}


def alone() -> None:
    """No world: this process runs the run alone (``Executor.world`` of an executor that scores for one process)."""
    return None


def forget_images(scorer, digests: Iterable[str]) -> None:
    """Tell ``scorer`` to forget these images where it can (``forget_images``: a scorer that keeps none has none)."""
    if capabilities(scorer).forget_images:
        scorer.forget_images(list(digests))
