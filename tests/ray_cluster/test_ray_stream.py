"""The stream of a run's cells (``run.executors.ray_stream``) on a pool that runs in this process and gives its
results back out of order: the chunks it cuts as built rows arrive, the records and journal it makes, the cells it
starts ahead, a failing cell, --resume. The same stream on real Ray actors: tests/ray_cluster/test_ray_executor.py."""

import json
import random

import pytest

from laya_robustness.recipes.bench import write_photo_rows
from laya_robustness.run.pipeline.cell_scoring import CellPlan, CellWork
from laya_robustness.run.executors.ray_pool import RayActorPool
from laya_robustness.run.executors.ray_stream import RayStream
from laya_robustness.run.pipeline.image_store import ImageStore, rows_with_pixels
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.journal import Journal
from laya_robustness.run.pipeline.chunks import CHUNK_BATCHES, Scoring, score_journaled, scoring_chunks
from laya_robustness.run.pipeline.variant_rows import VariantImages, adopt, family_variants

from helpers.fakes import NeighbourDependentScorer, OracleScorer

BATCH = 2  # 32-row chunks


class InProcessPool:
    """What ``RayStream`` needs of a ``RayActorPool``, in this process: ``results(feed)`` takes up to 8 shards at a
    time, runs them (a ``variants`` shard builds its group, a ``records`` shard scores its chunk) and yields their
    results in a shuffled order; ``calls`` lists the shards run, in order."""

    def __init__(self, store: ImageStore, scoring: Scoring, seed: int = 0, crash_family: str | None = None):
        self.slots, self.failed, self.store, self.scoring = [None, None], None, store, scoring
        self.random, self.crash_family, self.calls = random.Random(seed), crash_family, []

    variant_groups = staticmethod(RayActorPool.variant_groups)

    def object_store_bytes(self) -> int:
        return 0

    def results(self, feed):
        self.failed = None
        while True:
            shards = feed.take(8)
            if not shards:
                return
            self.random.shuffle(shards)
            for shard in shards:
                self.calls.append(shard.index)
                if shard.method == "variants":
                    family, seed, _ = shard.args
                    result = family_variants(family, shard.rows, seed, self.store)
                else:
                    if any(r.family == self.crash_family for r in shard.rows):
                        self.failed = shard
                        raise IndexError(f"a {self.crash_family} row")
                    result = self.scoring.records(rows_with_pixels(shard.rows))
                yield shard.index, result


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    write_photo_rows(folder, 40, size=(48, 36))
    store = ImageStore(64 << 20)
    return list(load_source_rows(folder, 0, 0, store=store).values())[0], store


def _plan(key, source, store, journal, built: bool, path: str = "batch"):
    family = key[0]
    work = lambda: CellWork([], [], journal, VariantImages([], store), complete=False)  # noqa: E731
    plan = CellPlan(key, work, lambda rows: scoring_chunks(rows, path, BATCH),
                    chunk_rows=CHUNK_BATCHES * BATCH if path == "batch" else None)
    if built:
        plan.build, plan.adopt = (family, source, 0), lambda rows: adopt(rows, source, store)
    else:
        plan.rows = source if family == "orig" else family_variants(family, source, 0, store)
    return plan


def _local(cells, source, store, tmp_path, scoring=None, path: str = "batch"):
    journal = Journal(tmp_path / "local.jsonl", "config", {})
    scoring = scoring or Scoring(OracleScorer("m"))
    out = {}
    for family, dataset in cells:
        rows = source if family == "orig" else family_variants(family, source, 0, store)
        out[family] = score_journaled(_Local(scoring), journal, rows, scoring_chunks(rows, path, BATCH))
    return out, journal


class _Local:
    def __init__(self, scoring):
        self.scoring = scoring

    def records(self, chunks):
        for i in range(len(chunks)):
            yield i, self.scoring.records(chunks[i])


CELLS = [("orig", "photos"), ("rotation", "photos"), ("option_order", "photos"), ("scale_pad", "photos")]


def _journal_lines(journal):
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in journal.path.read_text().splitlines())


@pytest.mark.parametrize("path", ["batch", "predict"])
def test_cells_streamed_out_of_order_give_the_local_records_and_journal(photos, tmp_path, path):
    """Groups built and chunks scored in a shuffled order, cells asked in their plan's order, by a scorer whose
    logits move with the rows beside them: every cell's records and the journal are those of scoring the cells one
    after another, so every chunk is the local run's. On the batch path rotation's 80 rows are cut in 32-row
    chunks as its groups arrive, so its first chunk is scored before its last group is built (on the predict path
    its chunks are whole image clusters, cut once all its rows are in)."""
    source, store = photos
    scoring = Scoring(NeighbourDependentScorer("m"), path=path)
    expected, local_journal = _local(CELLS, source, store, tmp_path, scoring, path)
    journal = Journal(tmp_path / "stream.jsonl", "config", {})
    pool = InProcessPool(store, scoring)
    built = {"rotation", "scale_pad"}
    keys = [(f, d, "cpu") for f, d in CELLS]
    stream = RayStream(pool, "rows", keys, lambda key: _plan(key, source, store, journal, key[0] in built, path))
    for key in keys:
        rows, records = stream.records(key, lambda total: _Tracker())
        assert records == expected[key[0]], key
    assert _journal_lines(journal) == _journal_lines(local_journal)
    rotation = [c for c in pool.calls if c[0] == 1]
    first_score = min(i for i, c in enumerate(rotation) if c[1] == "score")
    last_build = max(i for i, c in enumerate(rotation) if c[1] == "build")
    assert (first_score < last_build) == (path == "batch"), rotation
    # a later cell was under way before the first one was handed over: its shards were taken in the first take
    assert any(c[0] > 0 for c in pool.calls[:8]), pool.calls[:8]


def test_a_failing_cell_fails_alone_and_resume_scores_only_the_rest(photos, tmp_path):
    source, store = photos
    expected, _ = _local(CELLS, source, store, tmp_path)
    journal = Journal(tmp_path / "first.jsonl", "config", {})
    pool = InProcessPool(store, Scoring(OracleScorer("m")), crash_family="option_order")
    keys = [(f, d, "cpu") for f, d in CELLS]
    stream = RayStream(pool, "rows", keys, lambda key: _plan(key, source, store, journal, key[0] == "rotation"))
    for key in keys:
        if key[0] == "option_order":
            with pytest.raises(IndexError, match="a option_order row"):
                stream.records(key, lambda total: _Tracker())
        else:
            assert stream.records(key, lambda total: _Tracker())[1] == expected[key[0]]
    known = {json.loads(line)["key"]: json.loads(line)["record"] for line in journal.path.read_text().splitlines()}
    resumed = Journal(tmp_path / "second.jsonl", "config", known)
    pool = InProcessPool(store, Scoring(OracleScorer("m")))
    stream = RayStream(pool, "rows", keys, lambda key: _plan(key, source, store, resumed, key[0] == "rotation"))
    for key in keys:
        assert stream.records(key, lambda total: _Tracker())[1] == expected[key[0]]
    scored = [c for c in pool.calls if c[1] == "score"]
    assert {keys[c[0]][0] for c in scored} == {"option_order"}  # the rest came from the journal


class _Tracker:
    def update(self, n):
        pass

    def close(self):
        pass
