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

No rank is trusted to have scored what the others did: before any chunk is scored, every rank tells the others
what it is about to score (``agreement``: its scorer's weights and scoring configuration, the journal's
``config_fingerprint``, and every planned row's content key, in order), and a rank that differs from rank 0 ends the
run on every rank (``RanksDisagree``, exit 3) naming it and what differs: other weights, other settings or other
rows are never merged into one report. The records each rank found in its journal (``--resume``) are shared in
the same gather, so every rank cuts the same pending chunks whatever journal folder it read.

The gate gathers in a gloo group of its own (``_group``: the objects stay on the CPU whatever the world's backend),
whose timeout bounds how long a rank waits at a gather for the others (``stall_seconds()``: ``LAYA_RANK_STALL_S``,
default 600; the shares differ by at most one chunk, so that is the time one chunk may take). A world that breaks
under a gather (a rank killed or lost, or one that did not come in time) is a ``WorldBroken`` (exit 3) naming the
gather and why, and the gate makes no collective after it.
"""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from typing import Any, Callable, Mapping, NoReturn, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.errors import HarnessError, UsageError
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.pipeline.cell_scoring import CellPlan, CellProgress, CellWork
from laya_robustness.run.pipeline.journal import Journal, row_key
from laya_robustness.run.pipeline.prefetch import made_ahead
from laya_robustness.weights import short_hashes


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


#: The tags of a run's gathers: what a rank is about to score (``agreement``), a rank's share of the cells' records,
#: the report's plots it drew for the writing rank (``report.drawn_elsewhere``), and the end of its run.
AGREE, CELLS, DRAWINGS, END = "agree", "cells", "drawings", "end"
#: Seconds a rank waits at a gather for the others, unless ``LAYA_RANK_STALL_S`` says otherwise.
STALL_S = 600.0


class RanksDisagree(HarnessError):
    """The ranks are about to score other weights, settings or rows than rank 0: nothing is merged (exit 3)."""

    def __init__(self, message: str):
        super().__init__(message, stops_run=True)


class WorldBroken(HarnessError):
    """The ``torch.distributed`` world broke under one of the gate's gathers (a rank killed or lost; exit 3)."""

    def __init__(self, message: str):
        super().__init__(message, stops_run=True)


def stall_seconds() -> float:
    """How long a rank waits at a gather for the others (``LAYA_RANK_STALL_S``, else ``STALL_S``);
    a value that is no positive number is a ``UsageError`` naming the variable."""
    text = os.environ.get("LAYA_RANK_STALL_S")
    if text is None:
        return STALL_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UsageError(f"LAYA_RANK_STALL_S: {text!r} is not a positive number of seconds",
                         hint="set LAYA_RANK_STALL_S=600, or unset it")
    return value


_groups: dict[int, Any] = {}


def _group():
    """The gloo group the gate gathers in (its objects stay on the CPU whatever the world's backend), made by every
    rank together at its first gather with ``stall_seconds()`` as its timeout, and kept while the world lives."""
    import torch.distributed as dist

    world_group = id(dist.group.WORLD)
    if world_group not in _groups:
        _groups.clear()
        _groups[world_group] = dist.new_group(backend="gloo", timeout=timedelta(seconds=stall_seconds()))
    return _groups[world_group]


#: Why the world the gate gathers in broke (``WorldBroken``), by the id of its default group: no gather after it.
_broken: dict[int, str] = {}


def _gathered(tag: str, error: str | None, payload: Any) -> list[tuple[str, str | None, Any]]:
    """Every rank's ``(tag, error, payload)`` at this rank's next gather (in ``_group``); ``WorldBroken`` when the
    world broke under it (a rank died, or one did not arrive within ``stall_seconds()``) or before it: no gather is
    made after one broke."""
    import torch.distributed as dist

    world_group = id(dist.group.WORLD)
    if world_group in _broken:
        raise WorldBroken(_broken[world_group])
    gathered: list = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(gathered, (tag, error, payload), group=_group())
    except RuntimeError as exc:  # gloo's errors (DistBackendError is one): a peer died, was lost or never came
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        late = "timed out" in first.lower() or "timeout" in first.lower()
        _broken[world_group] = (
            f"rank {dist.get_rank()} " + (f"waited more than {stall_seconds():g} s" if late else "lost a rank") +
            f" at the gate's {tag} gather ({first}): a rank " + ("hung, or its share takes longer than "
                                                                 "LAYA_RANK_STALL_S allows" if late else
                                                                 "died, was killed or lost its connection"))
        raise WorldBroken(_broken[world_group]) from None
    return gathered


def gather_cells(error: str | None, own: dict, tag: str = CELLS) -> list[dict]:
    """Every rank's share of records (``own``: chunk number -> records; or, with ``tag`` ``AGREE``, what it is about
    to score), gathered to every rank; a ``RuntimeError`` naming each rank whose scoring raised (``error``) or whose
    run has gone past its scoring (ended, or handing over its drawings), on every rank."""
    alone = world() is None or world()[1] == 1  # a world of this process alone: nothing to gather
    gathered = [(tag, error, own)] if alone else _gathered(tag, error, own)
    why = [f"rank {rank}: {err if other == tag else f'its gate ended before scoring its share ({err or other})'}"
           for rank, (other, err, _) in enumerate(gathered) if err is not None or other != tag]
    if why:
        raise RuntimeError("scoring failed on " + "; ".join(why))
    return [part for _, _, part in gathered]


def gather_drawings(drawn: dict) -> dict:
    """The report's plots every rank drew (``drawn``: this rank's, by key), gathered to every rank; a rank whose run
    has ended (``end_of_gate``) gives none, and the writing rank draws what is missing."""
    gathered = _gathered(DRAWINGS, None, drawn)
    return {key: section for tag, _, part in gathered if tag == DRAWINGS for key, section in part.items()}


def end_of_gate(error: str | None = None) -> None:
    """This rank's run is over (``error``: why it ended early): wait until every rank's is, meeting the gathers of
    ranks still scoring (``gather_cells``), which then raise and end too. Every rank calls it once per run; after the
    world broke under a gather (``WorldBroken``) it waits for nothing."""
    ranks = world()
    while ranks is not None and ranks[1] > 1:
        try:
            gathered = _gathered(END, error or "no error", None)
        except WorldBroken:  # no rank to wait for
            return
        if all(tag == END for tag, _, _ in gathered):
            return


def agreement(identity: Mapping, cells: Sequence[tuple[Journal, Sequence[Row]]], keys: Sequence[tuple]) -> dict:
    """What this rank is about to score: its scorer's model and weights (``identity``), the journals' scoring
    configuration, a digest of the planned cells (``keys``) and every row's content in order (``cells``: each cell's
    journal and rows), and the records its journals already hold for them (``found``: row key -> record)."""
    rows, found = hashlib.sha256(repr(list(keys)).encode()), {}
    for journal, cell_rows in cells:
        for row in cell_rows:
            rows.update(row_key("", row).encode())
            key = row_key(journal.config, row)
            if key in journal.known:
                found[key] = journal.known[key]
    return {"model": str(identity.get("model")), "weights": identity.get("weights_sha256"),
            "config": sorted({journal.config for journal, _ in cells}), "rows": rows.hexdigest(), "found": found}


def disagreement(parts: Sequence[Mapping]) -> str | None:
    """How the ranks' ``agreement`` differ from rank 0's (weights, then settings, then rows), or None when they
    do not."""
    first, why = parts[0], []
    for rank, part in enumerate(parts[1:], start=1):
        if part["weights"] != first["weights"] or (not first["weights"] and part["model"] != first["model"]):
            why.append(f"rank {rank} scores model {part['model']!r} with weights {short_hashes(part['weights'])}, "
                       f"rank 0 model {first['model']!r} with weights {short_hashes(first['weights'])}")
        elif part["config"] != first["config"]:
            why.append(f"rank {rank} scores with other settings than rank 0 (scorer, precision, scoring path, batch "
                       "size, temperatures or attention kernel)")
        elif part["rows"] != first["rows"]:
            why.append(f"rank {rank} was given other rows or cells than rank 0 (its rows' digest "
                       f"{part['rows'][:12]}, rank 0's {first['rows'][:12]})")
    if not why:
        return None
    return ("the ranks would score different things, so their records cannot make one report: " + "; ".join(why) +
            ": give every rank the same model, data, families, rows_per_set, seed and scoring options")


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
    chunks with the scorer this process loads (``ScorerSource.scorer``); see the module doc. It streams (the planned
    cells are shared out together), builds variant images here and reports which rank scored what in no block: the
    records are a one-process run's."""

    streams = True
    world = staticmethod(world)  # every rank of the torch.distributed world runs the run
    sharing_world = staticmethod(sharing_world)

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

    def plan_more(self, keys: Sequence[tuple]) -> None:
        """Cells asked after those planned: scored together when the first of them is asked."""
        self.planned += [key for key in keys if key not in self.planned]

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
        plans = [self.plan_of(key) for key in keys]
        works = [plan.work() for plan in plans]
        try:
            self._agree(works, plans, keys)
        except RuntimeError as exc:
            self._fail(works, exc)
        for plan, work in zip(plans, works):
            rows = list(plan.rows)
            work.extend(rows, plan.chunks(rows))
            work.scoring.complete = True
        chunks = [(c, i) for c, work in enumerate(works) for i in range(len(work.scoring.pending))]
        owner = share([len(works[c].scoring.pending[i][0]) for c, i in chunks], size)
        own: dict[int, list[Record]] = {}
        error = None
        # this rank's chunks, the next ones' pixels made while one is scored (``run.pipeline.prefetch``), each
        # journaled and its images let go as soon as it is scored, as in a local run
        mine = [n for n in range(len(chunks)) if owner[n] == rank]
        waiting = [work.scoring.chunks() for work in works]
        pixels = made_ahead(waiting[c][i] for c, i in (chunks[n] for n in mine))
        try:
            for n in mine:
                c, i = chunks[n]
                own[n] = self.scoring.records(next(pixels))
                works[c].scoring.finish(i, own[n])
        except Exception as exc:  # noqa: BLE001  (told to every rank below, so none waits for this one)
            error = f"rank {rank}: {type(exc).__name__}: {exc}"
        finally:  # no thread left making chunks, whatever ended the loop
            pixels.close()
        try:
            gathered = gather_cells(error, own)
        except RuntimeError as exc:
            self._fail(works, exc)
        for part in gathered:
            for n, records in part.items():
                if owner[n] != rank:
                    c, i = chunks[n]
                    works[c].scoring.finish(i, records)
        self.scored.update(zip(keys, works))

    def _agree(self, works: list[CellWork], plans: list[CellPlan], keys: list[tuple]) -> None:
        """Every rank is about to score the same (``agreement``), or ``RanksDisagree`` on every rank; the records
        any rank's journal holds for these rows become every rank's (so all cut the same pending chunks)."""
        identity = getattr(self.scoring.scorer, "identity", {}) or {}
        mine = agreement(identity, [(work.scoring.journal, plan.rows) for plan, work in zip(plans, works)], keys)
        parts = gather_cells(None, mine, AGREE)
        why = disagreement(parts)
        if why:
            raise RanksDisagree(why)
        for work in works:
            for part in parts:
                work.scoring.journal.known.update(part["found"])

    def _fail(self, works: list[CellWork], exc: BaseException) -> NoReturn:
        """Let the cells' images go and remember ``exc`` for every later ask; raise it."""
        for work in works:
            work.close()
        self.error = exc
        raise exc

    def close(self) -> None:
        """Let every cell not handed over go (its images)."""
        for work in self.scored.values():
            work.close()
        self.scored = {}
