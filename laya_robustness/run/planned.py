"""A run's cells on their way to being scored: the rows each (family, dataset) scores, the
``run.pipeline.cell_scoring.CellWork`` that scores them, journaled as they are scored (``score``), and the cells the run's
checks will ask for (``plan``), scored as one stream where the run's executor streams
(``run.executors.base.Executor.streams``: this process, ``run.executors.local_stream``; a Ray pool,
``run.executors.ray_stream``; the ranks of a world, ``run.executors.distributed``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from laya_robustness.families import get_family
from laya_robustness.records import ORIG
from laya_robustness.run.errors import UsageError, stops_run
from laya_robustness.run.pipeline.cell_scoring import CellBuildError, CellPlan, CellWork
from laya_robustness.run.pipeline.chunks import consecutive_chunk_rows, scoring_chunks
from laya_robustness.run.pipeline.journal import JOURNAL_DIR, open_journal
from laya_robustness.run.pipeline.scorer_sources import identity_key
from laya_robustness.run.pipeline.variant_rows import VariantImages, adopt, builds_on_executor, family_variants
from laya_robustness.scoring.base import capabilities


@dataclass
class RunParts:
    """What a run's planned cells read of it: its ``settings``, ``inputs`` (``run.inputs.run_inputs.RunInputs``: the
    rows and their image store), ``scorers`` (``run.scorers.ScorerPool``), the ``token`` of the run it belongs to
    (its journals'), ``variants`` (the rows each family scores, kept for a later run, or None) and whether malloc
    keeps freed memory in this process (``kept_freed_memory``: variant images are then given back as soon as no
    row needs them; the run's one changing part, set by its caller)."""

    settings: Any
    inputs: Any
    scorers: Any
    token: str
    variants: dict | None
    kept_freed_memory: bool = False

    def source_of(self, family: str, dataset: str) -> str:
        """Which rows ``dataset`` belongs to (orig is scored on either kind)."""
        if family == ORIG:
            return "captions" if dataset in self.inputs.caption_rows else "rows"
        return get_family(family).source


class PlannedCells:
    """The cells of a run (its ``RunParts``): their rows, their scoring, their plan and streams; what is scored goes
    to ``held`` (``run.held.Held``). ``worker``: the xdist worker id (its journal's name); ``progress(device, label,
    total)`` makes a tracker per scored cell."""

    def __init__(self, run: RunParts, held, worker: str | None, progress):
        self.run, self.held, self.worker, self.progress = run, held, worker, progress
        self.planned: list[tuple[str, str, str]] = []
        self.planned_in_turn = False  # an xdist worker's plan, made a dataset at a time (``plan(then=True)``)
        self.streams: dict[tuple[str, str], object] = {}  # (device, source) -> its stream, or None
        self.journals: dict[str, object] = {}  # identity key -> the journal this process appends to

    def journal(self, device: str, source: str):
        """The journal this process appends ``source`` records of ``device`` to (``run.pipeline.journal``)."""
        key = identity_key(device, source)
        if key not in self.journals:
            run, s = self.run, self.run.settings
            self.journals[key] = open_journal(s.journal or s.report_dir / JOURNAL_DIR, key, self.worker,
                                              run.scorers.identity(device, source), journaled_settings(s, source),
                                              resume=s.resume, run=run.token)
        return self.journals[key]

    def score(self, family: str, dataset: str, device: str) -> None:
        """Score one family on one dataset, chunk by chunk, journaling each chunk as soon as it is scored (in the
        run's stream where the executor streams), once per process; with --resume the rows an earlier run
        journaled are reused."""
        key, run = (family, dataset, device), self.run
        if key in self.held.scored:
            return
        source, scorers = run.source_of(family, dataset), run.scorers
        executor = scorers.executor(device, source)
        scorer = None if scorers.run_executor.holds_scorers else scorers.scorer(device, source)  # none loaded here
        progress = lambda total: self.progress(device, f"{family}/{dataset}", total)  # noqa: E731
        stream, work = self.stream(device, source, executor), None
        if stream is None:
            work = self.work(self.rows(family, dataset, executor), self.journal(device, source), executor, scorer)
        try:
            cell = stream.records(key, progress)[1] if work is None else work.score(executor, progress)
        except UsageError:
            raise
        except CellBuildError as exc:  # the rows could not be built: the builder's error, as a local run raises it
            raise exc.error from None
        except Exception as exc:  # a crash while scoring is the harness's, never a gate failure
            raise scorers.harness_error(f"scoring {family}/{dataset} on {device} with model {scorers.model_name!r} "
                                       f"failed: {type(exc).__name__}: {exc}", stops_run(exc)) from exc
        self.held.scored_cell(device, family, dataset, cell)

    def source_rows(self, family: str, dataset: str) -> list:
        """The source rows of ``family`` on ``dataset`` (question rows, or caption rows)."""
        run = self.run
        return (run.inputs.caption_rows if run.source_of(family, dataset) == "captions" else run.inputs.rows)[dataset]

    def rows(self, family: str, dataset: str, executor=None):
        """The rows ``family`` scores on one dataset (the source rows for orig), their images waiting where the
        family allows (``run.pipeline.variant_rows``); built by the chunk ``executor`` where the run's executor
        ``builds_variants`` (a Ray pool: on its actors)."""
        run = self.run
        if run.variants is not None and (family, dataset) in run.variants:
            return run.variants[(family, dataset)]
        source = self.source_rows(family, dataset)
        builds_there = executor is not None and run.scorers.run_executor.builds_variants
        if family != ORIG and builds_there and builds_on_executor(family):
            rows = adopt(executor.variants(family, source, run.settings.seed), source, run.inputs.images)
        else:
            rows = family_variants(family, source, run.settings.seed, run.inputs.images)
        declared = get_family(family)
        if run.variants is not None and not (declared.reads_pixels and not declared.row_wise):
            run.variants[(family, dataset)] = rows  # their images wait in the store (not held), rebuilt when gone
        return rows

    def work(self, rows, journal, executor, scorer=None, complete: bool = True) -> CellWork:
        """The scoring of one cell's ``rows`` in the local run's chunks (``run.pipeline.cell_scoring.CellWork``)."""
        run = self.run
        return CellWork(rows, self.chunks(rows, scorer), journal,
                        VariantImages(rows, run.inputs.images, executor, give_back=run.kept_freed_memory), complete)

    def chunks(self, rows, scorer=None) -> list[list[int]]:
        """The local run's chunks of one cell's ``rows`` (``run.pipeline.chunks.scoring_chunks``)."""
        s = self.run.settings
        return scoring_chunks(rows, s.scoring_path, s.batch_size,
                              per_row=scorer is not None and capabilities(scorer).answers_in_text)

    def plan(self, cells: Sequence[tuple[str, str, str]], then: bool = False) -> None:
        """The (family, dataset, device) cells the checks will ask for, in order; each family's orig cell before
        it (a family's check scores the orig rows of its dataset first). With ``then``, cells asked after those
        planned before, added to the plan and to its streams (an xdist worker plans a dataset's cells as the first
        of its tests starts: it is given all of them, ``pytest_plugin.xdist.DatasetScheduling``)."""
        planned = [c for f, d, dev in cells for c in ([(ORIG, d, dev)] if f != ORIG else []) + [(f, d, dev)]]
        if not then:
            self.planned = list(dict.fromkeys(planned))
            return
        self.planned_in_turn = True
        new = [c for c in dict.fromkeys(planned) if c not in self.planned]
        self.planned += new
        for (device, source), stream in self.streams.items():
            if stream is not None:
                stream.plan_more([c for c in new if c[2] == device and self.run.source_of(c[0], c[1]) == source
                                  and c not in self.held.scored])

    def stream(self, device: str, source: str, executor):
        """The stream of the ``source`` cells planned on ``device`` and not scored yet (``Executor.stream``; the
        chunk ``executor`` lets their images go): None where the run's executor does not stream (it scores its
        cells one after another), where it builds the variants and the run keeps its rows for a later run (a
        model gated as it trains), or in an xdist worker whose plan is not made a dataset at a time (it scores the
        cells it is given, which every collected test does not tell)."""
        run = self.run
        runs_on = run.scorers.run_executor
        if (device, source) not in self.streams and (run.variants is None or not runs_on.builds_variants):
            stream = None
            if runs_on.streams and (self.worker is None or self.planned_in_turn):
                keys = [c for c in self.planned if c[2] == device and run.source_of(c[0], c[1]) == source
                        and c not in self.held.scored]
                stream = runs_on.stream(device, source, keys, lambda key: self._cell_plan(key, executor))
            self.streams[(device, source)] = stream
        return self.streams.get((device, source))

    def _cell_plan(self, key: tuple[str, str, str], executor) -> CellPlan:
        """How the stream gets cell ``key``'s rows: built where they are scored (a pixel family, where the executor
        ``builds_variants``: on the actors), else built here (or kept from an earlier run: ``rows``)."""
        run, (family, dataset, device) = self.run, key
        journal = self.journal(device, run.source_of(family, dataset))
        source, seed, s = self.source_rows(family, dataset), run.settings.seed, run.settings
        plan = CellPlan(key, lambda: self.work([], journal, executor, complete=False), self.chunks,
                        chunk_rows=consecutive_chunk_rows(s.scoring_path, s.batch_size))
        if family != ORIG and run.scorers.run_executor.builds_variants and builds_on_executor(family):
            plan.build, plan.adopt = (family, source, seed), lambda rows: adopt(rows, source, run.inputs.images)
        else:
            plan.rows = self.rows(family, dataset)
        return plan

    def close(self) -> None:
        """Stop every stream (what is in flight is cancelled; what was journaled stays)."""
        for stream in self.streams.values():
            if stream is not None:
                stream.close()


def journaled_settings(s, source: str) -> dict:
    """The settings a journal is written under (``settings``: ``run.inputs.options.Settings``): --resume reuses it
    only under the same."""
    return {"scorer": s.scorer, "precision": s.precision, "scoring_path": s.scoring_path,
            "batch_size": s.batch_size, "temperatures": s.temperatures, "source": source,
            "attn_implementation": s.attn_implementation, "pixel_cache_mb": s.pixel_cache_mb}
