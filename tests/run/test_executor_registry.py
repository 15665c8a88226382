"""The executors as a contract (``run.executors.registry``): an executor registered under a name is what
``--executor <name>`` scores with, its records a local run's; its options' checks are its own; an unknown name is a
usage error naming ``executor``."""

import gzip
from pathlib import Path
from types import SimpleNamespace

import pytest

import laya_robustness
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.executors import distributed
from laya_robustness.run.executors.distributed import DistributedExecutor
from laya_robustness.run.executors.ray_executor import RayExecutor
from laya_robustness.run.executors.registry import (
    EXECUTORS,
    executor_class,
    make_executor,
    register_executor,
    unregister_executor,
)

ROOT = Path(__file__).resolve().parents[2]
#: The smallest run that judges something: one family, a few rows, chunks of two rows.
SMALL = {"families": ["option_order"], "rows_per_set": 4, "batch_size": 2, "invariance": False,
         "limitations": "none"}


class BackwardsExecutor(LocalExecutor):
    """Scores a run in this process, each cell's chunks last first, counting the chunks it scored."""

    chunks_scored = 0

    def chunk_executor(self, device, source):
        forward = super().chunk_executor(device, source)

        def records(chunks):
            for index in reversed(range(len(chunks))):
                BackwardsExecutor.chunks_scored += 1
                yield index, forward.scoring.records(chunks[index])

        return SimpleNamespace(records=records, forget_images=forward.forget_images)


@pytest.fixture
def backwards():
    BackwardsExecutor.chunks_scored = 0
    register_executor("backwards", BackwardsExecutor)
    yield "backwards"
    unregister_executor("backwards")


def predictions(folder: Path) -> bytes:
    return gzip.decompress((folder / "predictions.jsonl.gz").read_bytes())


def test_a_registered_executor_scores_the_run_with_a_local_runs_records(backwards, tmp_path):
    local = laya_robustness.run_gate(root=ROOT, report_dir=tmp_path / "local", **SMALL)
    assert BackwardsExecutor.chunks_scored == 0
    toy = laya_robustness.run_gate(root=ROOT, report_dir=tmp_path / "toy", executor=backwards, **SMALL)
    assert BackwardsExecutor.chunks_scored > 1
    assert toy.judged > 0 and toy.judged == local.judged
    assert predictions(tmp_path / "toy") == predictions(tmp_path / "local")
    assert toy.checks == local.checks
    assert "executor" not in toy.summary["meta"]  # in this process: no executor block, as a local run


def test_a_registered_executors_check_stops_the_run_before_it_scores(tmp_path):
    def refuse(values, xdist_workers):
        raise UsageError("--executor refusing: it takes no run", "--executor")

    register_executor("refusing", BackwardsExecutor, check=refuse)
    try:
        with pytest.raises(laya_robustness.UsageError, match="executor refusing: it takes no run"):
            laya_robustness.run_gate(root=ROOT, report_dir=tmp_path / "refused", executor="refusing", **SMALL)
    finally:
        unregister_executor("refusing")
    assert not (tmp_path / "refused").exists()


def test_an_unknown_executor_is_a_usage_error_naming_executor():
    assert "dask" not in EXECUTORS
    with pytest.raises(laya_robustness.UsageError) as raised:
        laya_robustness.run_gate(root=ROOT, executor="dask", **SMALL)
    assert str(raised.value).startswith("executor: 'dask' is not one of local, ray")
    with pytest.raises(UsageError) as raised:
        make_executor("dask", None)
    assert raised.value.option == "--executor" and "'dask' is not one of local, ray" in str(raised.value)


class SecondRank(LocalExecutor):
    """Scores in this process as rank 1 of a world of two: it writes no reports and draws plots for the writer."""

    world = sharing_world = staticmethod(lambda: (1, 2))


def test_the_run_asks_the_executor_whether_ranks_share_it_not_its_name(tmp_path, monkeypatch):
    import laya_robustness.api as api
    import laya_robustness.report.drawn_elsewhere as drawn_elsewhere

    ended, drawn = [], []
    monkeypatch.setattr(api, "end_of_gate", lambda error=None: ended.append(error))
    monkeypatch.setattr(drawn_elsewhere, "draw_for_writer", lambda outcome, rank, size: drawn.append((rank, size)))
    register_executor("second-rank", SecondRank)
    try:
        result = laya_robustness.run_gate(root=ROOT, report_dir=tmp_path / "second", executor="second-rank", **SMALL)
    finally:
        unregister_executor("second-rank")
    assert result.judged > 0
    assert not (tmp_path / "second").exists()  # rank 0 writes the reports
    assert ended == [None] and drawn == [(1, 2)]


def test_each_executor_class_says_whether_ranks_share_a_run():
    assert executor_class("distributed") is DistributedExecutor and executor_class("ray") is RayExecutor
    assert executor_class("dask") is None and executor_class(None) is None
    for name in ("local", "ray"):
        assert executor_class(name).world() is None and executor_class(name).sharing_world() is None
    # every rank of the torch.distributed world runs it together; only a world of more than one rank shares it
    assert DistributedExecutor.world is distributed.world
    assert DistributedExecutor.sharing_world is distributed.sharing_world
