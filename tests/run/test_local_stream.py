"""A run's cells scored here as one stream (``run.executors.local_stream``): the next cell's rows built while the cell
before is scored (one whose images are all held until it is scored: at its turn), the records and journal of cells
scored alone, a cell asked out of order first, and an error (the scorer's, a build's, Ctrl-C) ending the stream's
threads with the journal whole, the next cell scored after it."""

import threading

import pytest

from laya_robustness.recipes.bench import write_photo_rows
from laya_robustness.rows import PendingImage
from laya_robustness.run.executors.local import SequentialChunkExecutor
from laya_robustness.run.executors import local_stream
from laya_robustness.run.executors.local_stream import LocalStream
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.cell_scoring import CellBuildError, CellPlan, CellWork
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.image_store import ImageStore
from laya_robustness.run.pipeline.journal import Journal
from laya_robustness.run.pipeline.prefetch import ROWS_THREAD_NAME, THREAD_NAME
from laya_robustness.run.pipeline.variant_rows import VariantImages, family_variants

from helpers.fakes import FailingScorer, PixelScorer
from helpers.threads import prefetch_threads_left

FAMILIES = ("rotation", "shift", "overlay")
KEYS = [(name, "photos", "cpu") for name in FAMILIES]


class Cells:
    """Photo rows and what a run gives a stream: ``plan_of(key)`` builds a cell's rows (noting the thread it ran on)
    in chunks of four rows, journaled in ``journal``; ``broken``: a family whose build raises."""

    def __init__(self, folder, name: str):
        write_photo_rows(folder / "rows", 3, size=(64, 48))
        self.store = ImageStore()
        self.source = load_source_rows(folder / "rows", 0, seed=0, store=self.store)["photos"]
        self.journal = Journal(folder / f"{name}.jsonl", "config", {})
        self.path, self.built, self.broken = folder / f"{name}.jsonl", [], None
        self.sources = {im.digest for row in self.source for im in row.images if isinstance(im, PendingImage)}

    def plan_of(self, key) -> CellPlan:
        self.built.append((key[0], threading.current_thread().name))
        if key[0] == self.broken:
            raise ValueError(f"{key[0]} could not be built")
        rows = family_variants(key[0], self.source, seed=0, store=self.store)
        return CellPlan(key, self.work, self.chunks, rows=rows)

    def work(self) -> CellWork:
        return CellWork([], [], self.journal, VariantImages([], self.store), complete=False)

    @staticmethod
    def chunks(rows):
        return [list(range(i, min(i + 4, len(rows)))) for i in range(0, len(rows), 4)]

    def alone(self, key, scorer):
        """The records of a cell scored alone, as a run scores it without a stream."""
        rows = self.plan_of(key).rows
        work = CellWork(rows, self.chunks(rows), self.journal, VariantImages(rows, self.store))
        return work.score(SequentialChunkExecutor(Scoring(scorer)), _progress)

    def variants_held(self) -> set:
        return set(self.store._held) - self.sources


def _progress(total):
    return type("Tracker", (), {"update": lambda self, n: None, "close": lambda self: None})()


def test_the_stream_gives_the_records_and_journal_of_cells_scored_alone(tmp_path):
    alone, streamed = Cells(tmp_path, "alone"), Cells(tmp_path, "streamed")
    expected = [alone.alone(key, PixelScorer("fake")) for key in KEYS]
    stream = LocalStream(Scoring(PixelScorer("fake")), KEYS, streamed.plan_of)
    try:
        got = [stream.records(key, _progress)[1] for key in KEYS]
    finally:
        stream.close()
    assert got == expected and streamed.path.read_text() == alone.path.read_text()
    assert [name for name, _ in streamed.built] == list(FAMILIES)
    assert all(thread.startswith(THREAD_NAME) for _, thread in streamed.built)
    assert not prefetch_threads_left() and not streamed.variants_held()  # every cell let its images go


class WaitsForTheNextCell(PixelScorer):
    """At the last chunk of the first cell, waits until the next cell's rows are being built (``next_built``)."""

    def __init__(self, cells: Cells, last_call: int, built: int = 2):
        super().__init__("fake")
        self.cells, self.last_call, self.built, self.calls, self.waited = cells, last_call, built, 0, None

    def score_batch(self, rows):
        self.calls += 1
        if self.calls == self.last_call:
            self.waited = _wait_until(lambda: len(self.cells.built) >= self.built)
        return super().score_batch(rows)


def _wait_until(condition) -> bool:
    event = threading.Event()
    for _ in range(3000):
        if condition():
            return True
        event.wait(0.01)
    return False


def test_the_next_cells_rows_are_built_while_the_cell_before_is_scored_from_its_first_chunk(tmp_path):
    cells = Cells(tmp_path, "ahead")
    assert len(Cells.chunks(family_variants(FAMILIES[0], cells.source, 0, ImageStore(0)))) >= 2
    scorer = WaitsForTheNextCell(cells, last_call=1)
    stream = LocalStream(Scoring(scorer), KEYS, cells.plan_of)
    try:
        stream.records(KEYS[0], _progress)
    finally:
        stream.close()
    assert scorer.waited is True and cells.built[1][0] == FAMILIES[1]
    assert not prefetch_threads_left() and not cells.variants_held()


def test_cells_planned_later_join_the_stream_and_are_built_while_the_one_before_is_scored(tmp_path):
    cells, alone = Cells(tmp_path, "later"), Cells(tmp_path, "alone")
    first_chunks = len(Cells.chunks(family_variants(FAMILIES[0], cells.source, 0, ImageStore(0))))
    scorer = WaitsForTheNextCell(cells, last_call=first_chunks + 1, built=3)  # at the second cell's first chunk
    stream = LocalStream(Scoring(scorer), KEYS[:1], cells.plan_of)
    try:
        got = [stream.records(KEYS[0], _progress)[1]]
        stream.plan_more(KEYS[1:])
        got += [stream.records(key, _progress)[1] for key in KEYS[1:]]
    finally:
        stream.close()
    assert scorer.waited is True and [name for name, _ in cells.built] == list(FAMILIES)
    assert got == [alone.alone(key, PixelScorer("fake")) for key in KEYS]
    assert not prefetch_threads_left() and not cells.variants_held()


def test_a_cell_whose_images_are_all_held_until_scored_is_built_at_its_turn_not_ahead(tmp_path, monkeypatch):
    monkeypatch.setattr(local_stream, "holds_images", lambda name: name == FAMILIES[1])
    cells, alone = Cells(tmp_path, "held"), Cells(tmp_path, "alone")
    stream = LocalStream(Scoring(PixelScorer("fake")), KEYS, cells.plan_of)
    try:
        got = [stream.records(key, _progress)[1] for key in KEYS]
    finally:
        stream.close()
    assert got == [alone.alone(key, PixelScorer("fake")) for key in KEYS]
    on_rows_thread = {name: thread.startswith(ROWS_THREAD_NAME) for name, thread in cells.built}
    assert on_rows_thread == {FAMILIES[0]: True, FAMILIES[1]: False, FAMILIES[2]: True}  # the others built ahead


def test_a_cell_asked_out_of_order_goes_first_and_a_cell_built_ahead_and_never_scored_lets_its_images_go(tmp_path):
    alone, streamed = Cells(tmp_path, "alone"), Cells(tmp_path, "streamed")
    stream = LocalStream(Scoring(PixelScorer("fake")), KEYS, streamed.plan_of)
    try:
        got = {key: stream.records(key, _progress)[1] for key in (KEYS[2], KEYS[0])}
    finally:
        stream.close()  # the plan's next cell, rotation then shift, was built ahead: never scored
    assert got == {key: alone.alone(key, PixelScorer("fake")) for key in (KEYS[2], KEYS[0])}
    assert [name for name, _ in streamed.built][:2] == ["overlay", "rotation"]
    assert not prefetch_threads_left() and not streamed.variants_held()


@pytest.mark.parametrize("error", [ValueError("the scorer broke"), KeyboardInterrupt()])
def test_an_error_in_a_cell_ends_the_thread_keeps_the_journal_and_the_next_cell_is_scored(tmp_path, error):
    cells, alone = Cells(tmp_path, "failing"), Cells(tmp_path, "alone")
    first_rows = len(cells.plan_of(KEYS[0]).rows)
    first_chunks = len(Cells.chunks(range(first_rows)))
    assert len(Cells.chunks(cells.plan_of(KEYS[1]).rows)) >= 2
    cells.built.clear()
    stream = LocalStream(Scoring(FailingScorer(error, at=first_chunks + 2)), KEYS, cells.plan_of)
    try:
        stream.records(KEYS[0], _progress)
        with pytest.raises(type(error)):
            stream.records(KEYS[1], _progress)
        assert not prefetch_threads_left()
        journaled = cells.path.read_text().count("\n")
        last = stream.records(KEYS[2], _progress)[1]
    finally:
        stream.close()
    assert journaled == first_rows + 4  # the first cell, and the second's first chunk, whole
    assert [name for name, _ in cells.built].count(FAMILIES[1]) == 1  # the failed cell is not built again ahead
    assert last == alone.alone(KEYS[2], PixelScorer("fake")) and not prefetch_threads_left()


def test_a_cell_whose_rows_cannot_be_built_raises_the_builders_error_where_it_is_asked_for(tmp_path):
    cells = Cells(tmp_path, "broken")
    cells.broken = FAMILIES[1]
    stream = LocalStream(Scoring(PixelScorer("fake")), KEYS, cells.plan_of)
    try:
        stream.records(KEYS[0], _progress)
        with pytest.raises(CellBuildError) as raised:
            stream.records(KEYS[1], _progress)
        assert str(raised.value.error) == "shift could not be built"
        assert len(stream.records(KEYS[2], _progress)[1]) > 0
    finally:
        stream.close()
    assert not prefetch_threads_left() and not cells.variants_held()


def test_a_cell_of_a_family_no_one_declared_raises_its_build_error_where_it_is_asked_for(tmp_path):
    cells = Cells(tmp_path, "unknown")
    keys = [KEYS[0], ("no_such_family", "photos", "cpu"), KEYS[2]]
    stream = LocalStream(Scoring(PixelScorer("fake")), keys, cells.plan_of)
    try:
        stream.records(keys[0], _progress)
        with pytest.raises(CellBuildError) as raised:
            stream.records(keys[1], _progress)
        assert "no_such_family" in str(raised.value.error)
        assert len(stream.records(keys[2], _progress)[1]) > 0
    finally:
        stream.close()
    assert not prefetch_threads_left() and not cells.variants_held()
