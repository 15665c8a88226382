"""``--executor distributed``: a run's rows scored by every rank of a ``torch.distributed`` world, each rank its share
(``DistributedExecutor``), as the training callback gates a model under DDP or FSDP.

Every rank runs the same run (the same rows, variants and checks, in the same order), with the model whole on
each (a DDP replica, or an FSDP model made whole while it is scored: ``scoring.sharded``). The cells the run's
checks will ask for are planned (``GateRun.plan``); when the first is asked for, every planned cell is cut into the
local run's chunks, and each chunk is given to one rank (``share``: the largest chunks first, each to the rank with
the fewest rows so far). Each rank scores its own chunks (each journaled, and its variant images and the scorer's
caches of them let go, as soon as it is scored, as in a local run), the records of all are gathered to every rank
(``all_gather_object``), and every cell is then answered from them. So the records are those of a one-process run
(its chunks, batches and records), only where each chunk was scored differs, and every rank holds them all: rank 0
summarises, judges and writes, the others judge and write nothing. The forwards themselves hold no collective, so
the ranks need not do the same number of them.

No rank waits forever for another: every collective of a run is one ``all_gather_object``, tagged. A rank whose
scoring raised says so in its share, and every rank raises it, naming the rank. A rank whose run ended early (its
gate raised before it shared its chunks) calls ``end_of_gate``, as every rank does once its run is over, which
gathers until every rank has ended; a rank still scoring meets it at its next gather, raises, and ends too; a rank
handing over the plots it drew (``gather_drawings``) meets it, and ends.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.scoring.cells import CellPlan, CellProgress, CellWork


def world() -> tuple[int, int] | None:
    """(rank, world size) of this process's ``torch.distributed`` default group; None when none is initialised."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), dist.get_world_size()


def sharing_world() -> tuple[int, int] | None:
    """``world()`` where it has more than one rank, whose ranks share a run; None for no world, or a world of this
    process alone, which runs as one process: nothing to share, and no collective (after one, the process's threaded
    forwards ran up to 40% slower here: ``docs/training.md``)."""
    ranks = world()
    return ranks if ranks is not None and ranks[1] > 1 else None


def check_distributed(values: Mapping[str, Any], xdist_workers: object) -> None:
    """--executor distributed needs an initialised ``torch.distributed`` process group and no xdist (each a usage
    error naming --executor)."""
    if world() is None:
        raise UsageError("--executor distributed: no torch.distributed process group is initialised in this "
                         "process: launch with torchrun and call torch.distributed.init_process_group first (a "
                         "Trainer does), or use --executor local", "--executor")
    if xdist_workers not in (None, 0, "0"):
        raise UsageError(f"--executor distributed: the ranks spread the scoring; it cannot run with xdist (-n "
                         f"{xdist_workers}): drop -n", "--executor")


#: The tags of a run's gathers: a rank's share of the cells' records, the report's plots it drew for the writing
#: rank (``report.drawn_elsewhere``), and the end of its run.
CELLS, DRAWINGS, END = "cells", "drawings", "end"


def gather_cells(error: str | None, own: dict) -> list[dict]:
    """Every rank's share of records (``own``: chunk number -> records), gathered to every rank; a ``RuntimeError``
    naming each rank whose scoring raised (``error``) or whose run has gone past its scoring (ended, or handing
    over its drawings), on every rank."""
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    if len(gathered) == 1:  # a world of this process alone: nothing to gather
        gathered[0] = (CELLS, error, own)
    else:
        dist.all_gather_object(gathered, (CELLS, error, own))
    why = [f"rank {rank}: {err if tag == CELLS else f'its gate ended before scoring its share ({err or tag})'}"
           for rank, (tag, err, _) in enumerate(gathered) if err is not None or tag != CELLS]
    if why:
        raise RuntimeError("scoring failed on " + "; ".join(why))
    return [part for _, _, part in gathered]


def gather_drawings(drawn: dict) -> dict:
    """The report's plots every rank drew (``drawn``: this rank's, by key), gathered to every rank; a rank whose run
    has ended (``end_of_gate``) gives none, and the writing rank draws what is missing."""
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (DRAWINGS, None, drawn))
    return {key: section for tag, _, part in gathered if tag == DRAWINGS for key, section in part.items()}


def end_of_gate(error: str | None = None) -> None:
    """This rank's run is over (``error``: why it ended early): wait until every rank's is, meeting the gathers of
    ranks still scoring (``gather_cells``), which then raise and end too. Every rank calls it once per run."""
    import torch.distributed as dist

    while dist.get_world_size() > 1:
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (END, error or "no error", None))
        if all(tag == END for tag, _, _ in gathered):
            return


def share(sizes: Sequence[int], ranks: int) -> list[int]:
    """The rank that scores each chunk of ``sizes`` rows: the largest first (ties in order), each to the rank with the
    fewest rows so far (ties: the lowest rank), so no rank holds more than the fair share plus one chunk.

    >>> share([256, 40, 256, 8, 100], 2)
    [0, 1, 1, 1, 0]
    """
    load, out = [0] * ranks, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(ranks), key=lambda r: (load[r], r))
        out[i], load[rank] = rank, load[rank] + sizes[i]
    return out


class DistributedExecutor(LocalExecutor):
    """Scores a run's rows on every rank of the ``torch.distributed`` world, each rank its share of the planned cells'
    chunks with the scorer this process loads (``RunScorers.scorer``); see the module doc. It streams (the planned
    cells are shared out together), builds variant images here and reports which rank scored what in no block: the
    records are a one-process run's."""

    streams = True

    def connect(self) -> None:
        """The process group must be there (``check_distributed``)."""
        check_distributed({}, None)

    def stream(self, device: str, source: str, keys: Sequence[tuple],
               plan_of: Callable[[tuple], CellPlan]) -> "SharedCells":
        """The planned cells ``keys`` of ``source`` rows on ``device``, shared out over the ranks."""
        return SharedCells(self.scoring(device, source), keys, plan_of)


class SharedCells:
    """The cells ``keys`` scored together by every rank, each its share of their chunks (``share``), the records
    gathered to every rank; ``records(key, progress)`` answers one cell. A cell the plan did not name is scored alone
    when it is asked for (every rank asks for the same cells in the same order, so the ranks gather together)."""

    def __init__(self, scoring, keys: Sequence[tuple], plan_of: Callable[[tuple], CellPlan]):
        self.scoring, self.plan_of = scoring, plan_of
        self.planned = list(dict.fromkeys(keys))
        self.scored: dict[tuple, CellWork] = {}
        self.error: BaseException | None = None

    def records(self, key: tuple, progress: CellProgress) -> tuple[Sequence[Row], list[Record]]:
        """The rows and records of cell ``key`` (scoring the planned cells first, when none is scored yet)."""
        if self.error is not None:
            raise self.error
        if key not in self.scored:
            self._score([k for k in self.planned if k not in self.scored] if key in self.planned else [key])
        work = self.scored.pop(key)
        work.show(progress)
        work.close()
        return work.rows, work.scoring.records()

    def _score(self, keys: list[tuple]) -> None:
        import torch.distributed as dist

        rank, size = dist.get_rank(), dist.get_world_size()
        works = []
        for key in keys:
            plan = self.plan_of(key)
            work = plan.work()
            rows = list(plan.rows)
            work.extend(rows, plan.chunks(rows))
            work.scoring.complete = True
            works.append(work)
        chunks = [(c, i) for c, work in enumerate(works) for i in range(len(work.scoring.pending))]
        owner = share([len(works[c].scoring.pending[i][0]) for c, i in chunks], size)
        own: dict[int, list[Record]] = {}
        error = None
        try:
            for n, (c, i) in enumerate(chunks):
                if owner[n] == rank:  # journaled and its images let go as soon as it is scored, as a local run
                    own[n] = self.scoring.records(works[c].scoring.chunks()[i])
                    works[c].scoring.finish(i, own[n])
        except Exception as exc:  # noqa: BLE001  (told to every rank below, so none waits for this one)
            error = f"rank {rank}: {type(exc).__name__}: {exc}"
        try:
            gathered = gather_cells(error, own)
        except RuntimeError as exc:
            for work in works:
                work.close()
            self.error = exc
            raise
        for part in gathered:
            for n, records in part.items():
                if owner[n] != rank:
                    c, i = chunks[n]
                    works[c].scoring.finish(i, records)
        self.scored.update(zip(keys, works))

    def close(self) -> None:
        """Let every cell not handed over go (its images)."""
        for work in self.scored.values():
            work.close()
        self.scored = {}
