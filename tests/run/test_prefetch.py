"""The next chunks made ready while one is scored (``run.pipeline.prefetch``): in order, at most ``ahead`` chunks
beyond the one handed over, the same records and journal as chunks made when asked for, and a scorer's or a
chunk's error, or Ctrl-C, ending the scoring as it did without them, with no thread left."""

import gzip
import threading

import pytest
from PIL import Image

from laya_robustness.families import declared
from laya_robustness.recipes.bench import write_photo_rows
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors import ray_actor
from laya_robustness.run.executors.local import ConcurrentChunkExecutor, SequentialChunkExecutor
from laya_robustness.run.executors.ray_actor import ScoringActor
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline import chunks as chunks_module
from laya_robustness.run.pipeline.chunks import Scoring, score_journaled
from laya_robustness.run.pipeline.image_store import ImageSource, ImageStore
from laya_robustness.run.pipeline.journal import Journal
from laya_robustness.run.pipeline.prefetch import THREAD_NAME, chunks_ahead, made_ahead
from laya_robustness.run.pipeline.variant_rows import family_variants

from helpers.fakes import FailingScorer, PixelScorer
from helpers.limits import NOTHING_FAILS_LIMITS
from helpers.threads import prefetch_threads_left

PIXEL_FAMILIES = [f.name for f in declared() if f.reads_pixels]


@pytest.mark.parametrize("ahead", [0, 1, 3])
def test_chunks_come_in_order_and_at_most_ahead_are_made_beyond_the_one_handed_over(ahead):
    started: list[int] = []
    made_on: set[str] = set()

    def make(i):
        started.append(i)
        made_on.add(threading.current_thread().name)
        return i * i

    for i, value in enumerate(made_ahead((make(i) for i in range(7)), ahead)):
        assert value == i * i and max(started) <= i + ahead
    assert started == list(range(7)) and not prefetch_threads_left()
    assert all(name.startswith(THREAD_NAME) for name in made_on) == (ahead > 0)


def test_a_caller_that_stops_early_leaves_no_thread_and_is_given_what_was_made_and_not_handed_over():
    started, dropped = [], []
    ahead = made_ahead((started.append(i) or i for i in range(10)), 2, dropped.append)
    assert [next(ahead), next(ahead)] == [0, 1]
    ahead.close()
    assert not prefetch_threads_left() and max(started) <= 3 and dropped == started[2:]


@pytest.mark.parametrize("text", ["-1", "one", "1.5"])
def test_a_prefetch_setting_that_is_no_whole_number_is_a_usage_error_naming_it(monkeypatch, text):
    monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", text)
    with pytest.raises(UsageError, match="LAYA_PREFETCH_CHUNKS"):
        chunks_ahead()


@pytest.fixture
def photo_variants(tmp_path):
    """Photo rows' variants in every family that reads pixels, their images waiting in a store that holds
    nothing (each chunk builds its variants again), and chunks of five rows."""
    write_photo_rows(tmp_path / "rows", 3, size=(64, 48))
    store = ImageStore(max_bytes=0)
    source = load_source_rows(tmp_path / "rows", 0, seed=0, store=store)["photos"]
    rows = [v for name in PIXEL_FAMILIES for v in family_variants(name, source, seed=0, store=store)]
    assert {r.family for r in rows} == set(PIXEL_FAMILIES)  # every pixel family fires
    return rows, [list(range(i, min(i + 5, len(rows)))) for i in range(0, len(rows), 5)]


def _score(tmp_path, name, rows, chunks, scorer):
    """The records of a cell scored one chunk after another, and the journal's lines (what stayed of an error)."""
    journal = Journal(tmp_path / f"{name}.jsonl", "config", {})
    error = None
    try:
        records = score_journaled(SequentialChunkExecutor(Scoring(scorer)), journal, rows, chunks)
    except BaseException as exc:  # noqa: BLE001  (Ctrl-C included: compared below)
        records, error = None, exc
    return records, (tmp_path / f"{name}.jsonl").read_text(), error


@pytest.mark.parametrize("ahead", ["0", "1", "2"])
def test_the_records_and_journal_are_those_of_chunks_made_when_asked_for(photo_variants, tmp_path, monkeypatch, ahead):
    rows, chunks = photo_variants
    made_on: list[str] = []
    make = chunks_module.rows_with_pixels
    monkeypatch.setattr(chunks_module, "rows_with_pixels",
                        lambda rows: made_on.append(threading.current_thread().name) or make(rows))
    monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", "0")
    before = _score(tmp_path, "before", rows, chunks, PixelScorer("fake"))
    monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", ahead)
    made_on.clear()
    after = _score(tmp_path, f"after{ahead}", rows, chunks, PixelScorer("fake"))
    assert after[0] == before[0] and after[1] == before[1] and before[2] is None
    assert len(made_on) == len(chunks) and all(name.startswith(THREAD_NAME) for name in made_on) == (ahead != "0")
    assert not prefetch_threads_left()


def _boom():
    raise RuntimeError("the image could not be made")


@pytest.mark.parametrize("where", ["scorer", "interrupt", "chunk"])
def test_an_error_ends_the_scoring_as_without_prefetch_journal_whole_and_no_thread_left(photo_variants, tmp_path,
                                                                                        monkeypatch, where):
    rows, chunks = photo_variants
    if where == "chunk":  # the third chunk's first image cannot be made: raised where the chunk is asked for
        broken = ImageSource(ImageStore(0), _boom, "a broken image").waiting(Image.new("RGB", (4, 4)))
        rows = list(rows)
        rows[chunks[2][0]] = rows[chunks[2][0]].replaced(images=(broken,))
    error = {"scorer": ValueError("the scorer broke"), "interrupt": KeyboardInterrupt()}.get(where)
    runs = []
    for ahead in ("0", "1"):
        monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", ahead)
        scorer = FailingScorer(error, at=3) if error else PixelScorer("fake")
        runs.append(_score(tmp_path, f"{where}{ahead}", rows, chunks, scorer))
        assert not prefetch_threads_left()
    (_, before, error_before), (_, after, error_after) = runs
    assert type(error_after) is type(error_before) and str(error_after) == str(error_before)
    assert error_after is not None and after == before and before.count("\n") == 10  # chunks 1 and 2, whole


class CountedChunks:
    """Chunks made when asked for: ``most`` is the most made and not yet scored at once."""

    def __init__(self, n: int):
        self.n, self.made, self.done, self.most, self.lock = n, 0, 0, 0, threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        with self.lock:
            self.made += 1
            self.most = max(self.most, self.made - self.done)
        return [index]


class HoldingScoring:
    """Scores a chunk as its index; the first chunk is held until five others are scored."""

    def __init__(self, chunks: CountedChunks):
        self.chunks, self.released, self.scorer = chunks, threading.Event(), None

    def records(self, rows):
        if rows[0] == 0:
            assert self.released.wait(30), "never released"
        with self.chunks.lock:
            self.chunks.done += 1
            if self.chunks.done >= 5:
                self.released.set()
        return [f"record {rows[0]}"]


def test_concurrent_requests_hold_at_most_their_workers_and_the_chunks_ahead(monkeypatch):
    monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", "1")
    chunks = CountedChunks(20)
    results = list(ConcurrentChunkExecutor(HoldingScoring(chunks), workers=2).records(chunks))
    assert sorted(index for index, _ in results) == list(range(20)) and chunks.made == 20
    assert all(records == [f"record {index}"] for index, records in results)
    assert chunks.most <= 2 + 1  # while the first chunk was held, the others went by, never more in hand


class OneAtATime(PixelScorer):
    """Fails a test if two calls score at once; its first call says it ``entered`` and waits until ``made``."""

    def __init__(self):
        super().__init__("fake")
        self.entered, self.made, self.inside, self.waited = threading.Event(), threading.Event(), threading.Lock(), []

    def score_batch(self, rows):
        assert self.inside.acquire(blocking=False), "two calls scored at once"
        try:
            if not self.waited:
                self.entered.set()
                self.waited.append(self.made.wait(30))
            return super().score_batch(rows)
        finally:
            self.inside.release()


def test_a_ray_actor_makes_a_chunks_pixels_while_another_is_scored_and_scores_one_at_a_time(photo_variants,
                                                                                             monkeypatch):
    rows, chunks = photo_variants
    scorer = OneAtATime()
    actor = ScoringActor({"rows": lambda: Scoring(scorer)}, "cpu")
    make, calls = ray_actor.rows_with_pixels, []

    def pixels(rows):
        out = make(rows)
        calls.append(1)
        if len(calls) == 2:
            scorer.made.set()
        return out

    monkeypatch.setattr(ray_actor, "rows_with_pixels", pixels)
    shards = [[rows[i] for i in chunk] for chunk in chunks[:2]]
    out: dict[int, list] = {}
    first = threading.Thread(target=lambda: out.__setitem__(0, actor.records("rows", shards[0])))
    first.start()
    assert scorer.entered.wait(30)
    out[1] = actor.records("rows", shards[1])
    first.join()
    assert scorer.waited == [True]  # the second chunk's pixels were made while the first was being scored
    alone = Scoring(PixelScorer("fake"))
    assert out == {i: alone.records(make(shard)) for i, shard in enumerate(shards)}


def test_a_gate_run_writes_the_same_predictions_with_chunks_made_ahead(tmp_path, monkeypatch):
    """Whole runs over photo rows through every pixel family: cells scored one by one as they are asked for, each
    chunk made when asked for (as before the stream), then streamed without and with chunks made ahead: the
    predictions file is the same, byte for byte."""
    import laya_robustness
    from laya_robustness.run.executors.local import LocalExecutor

    write_photo_rows(tmp_path / "rows", 4, size=(64, 48))
    (tmp_path / "limits.toml").write_text(NOTHING_FAILS_LIMITS)
    predictions = []
    for streams, ahead in ((False, "0"), (True, "0"), (True, "1")):
        monkeypatch.setattr(LocalExecutor, "streams", streams)
        monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", ahead)
        report = tmp_path / f"report{streams}{ahead}"
        laya_robustness.run_gate(data=tmp_path / "rows", scorer="helpers.fakes:pixels", model="fake", batch_size=2,
                                 families=PIXEL_FAMILIES, invariance=False, thresholds=tmp_path / "limits.toml",
                                 report_dir=report, image_cache_mb=0)
        with gzip.open(report / "predictions.jsonl.gz", "rb") as fh:
            predictions.append(fh.read())
    assert predictions[0] == predictions[1] == predictions[2]
    assert predictions[0].count(b"\n") > 4 * len(PIXEL_FAMILIES)
    assert not prefetch_threads_left()
