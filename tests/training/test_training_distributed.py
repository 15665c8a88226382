"""``RobustnessCallback`` under a real ``torchrun`` world of 2 CPU processes (gloo;
``tests/helpers/torchrun_gate.py``): a Trainer's DDP, and a model sharded with FSDP2's ``fully_shard``. Every rank
scores a share of each evaluation's rows (together, every row once), every rank is told the verdict, no rank waits
forever, and the records and the weights' identity equal those of the saved model gated in one process. Also the
``--executor distributed`` rules, and the chunk share."""

import json
from pathlib import Path

import pytest
from transformers import AutoModelForImageTextToText, AutoProcessor

from laya_robustness import run_gate
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.distributed import share
from laya_robustness.training import RobustnessCallback

from helpers.paths import ROOT, TESTS
from helpers.records import prediction_lines
from helpers.torchrun_parts import torchrun

PROGRAM = TESTS / "helpers" / "torchrun_gate.py"
GATE = {"families": ["option_order", "text"], "rows_per_set": 6}
#: Seconds a world may take before the test says it hung (a run takes about 10 s here).
WORLD_TIMEOUT = 300


def _torchrun(setup: str, out: Path) -> None:
    torchrun(PROGRAM, setup, out, WORLD_TIMEOUT)


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def world(request, tmp_path_factory):
    """(setup, its folder, each rank's account) of one torchrun world, and the saved model gated in one process."""
    out = tmp_path_factory.mktemp(request.param)
    _torchrun(request.param, out)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    model = AutoModelForImageTextToText.from_pretrained(out / "saved", attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(out / "saved")
    alone = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=out / "alone", root=ROOT, **GATE)
    alone.gate(model, processor, 4)
    return request.param, out, ranks, out / "alone" / "checkpoint-4"


def test_every_rank_scores_a_share_and_together_every_row_once(world):
    _, out, ranks, _ = world
    records = sum(len(prediction_lines(out / "robustness" / f"checkpoint-{step}")) for step in (2, 4))
    assert all(r["scored_rows"] > 0 for r in ranks)
    assert sum(r["scored_rows"] for r in ranks) == records
    assert max(r["scored_rows"] for r in ranks) <= 0.6 * records  # shared out, not all on one rank


def test_every_rank_is_told_the_verdict_and_only_the_main_one_writes(world):
    _, out, ranks, _ = world
    assert ranks[0]["gated"] == ranks[1]["gated"] and sorted(ranks[0]["gated"]) == ["2", "4"]
    assert ranks[0]["errors"] == ranks[1]["errors"] == {}
    assert sorted(p.name for p in (out / "robustness").iterdir()) == ["checkpoint-2", "checkpoint-4"]


def test_the_ranks_that_do_not_write_draw_the_plots_of_the_one_that_does(world):
    """Rank 1 draws both plots of each evaluation's page and rank 0 none; the page's plots are those the saved model's
    page has, drawn in one process."""
    _, out, ranks, alone = world
    assert (ranks[0]["drawn_plots"], ranks[1]["drawn_plots"]) == (0, 2 * 2)
    page = (out / "robustness" / "checkpoint-4" / "report.html").read_text()
    sections = [part.split("<h2", 1)[0] for part in page.split('<h2 id="reliability">')[1].split('<h2 id="strength">')]
    assert len(sections) == 2 and '<img class="plot" src="data:image/svg+xml;base64,' in sections[0]
    alone_page = (alone / "report.html").read_text()
    assert all(section in alone_page for section in sections)


def test_the_records_and_identity_are_the_saved_models_in_one_process(world):
    setup, out, ranks, alone = world
    assert prediction_lines(out / "robustness" / "checkpoint-4") == prediction_lines(alone)
    saved = json.loads((alone / "summary.json").read_text())["meta"]["model"]["weights_sha256"]
    assert ranks[0]["weights"]["4"] == ranks[1]["weights"]["4"] == saved
    assert ranks[0]["weights"]["2"] != saved  # the model trained between the evaluations


@pytest.mark.parametrize("where", ["scoring", "early"])
def test_a_rank_whose_gate_breaks_is_named_on_the_main_one_and_no_rank_waits(tmp_path, where):
    """Rank 1's gate breaks at the first evaluation, in its share of the scoring or before it shares anything: the
    world ends (no rank waits forever), rank 0 notes the evaluation as not finished naming rank 1, and the next
    evaluation is gated whole on both."""
    _torchrun(f"broken-{where}", tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert list(ranks[0]["errors"]) == ["1"] and "rank 1:" in ranks[0]["errors"]["1"]
    assert "injected" in ranks[0]["errors"]["1"]
    note = (tmp_path / "robustness" / "checkpoint-1" / "incomplete.txt").read_text()
    assert "rank 1:" in note
    assert sorted(ranks[0]["gated"]) == sorted(ranks[1]["gated"]) == ["2"]
    assert prediction_lines(tmp_path / "robustness" / "checkpoint-2")


def test_the_chunks_are_shared_largest_first_to_the_least_loaded_rank():
    assert share([256, 40, 256, 8, 100], 2) == [0, 1, 1, 1, 0]
    assert share([10] * 5, 3) == [0, 1, 2, 0, 1]
    assert share([], 2) == []
    loads = [0, 0, 0]
    sizes = [256, 256, 256, 17, 3, 200, 90]
    for size, rank in zip(sizes, share(sizes, 3)):
        loads[rank] += size
    assert max(loads) - min(loads) <= max(sizes)


def test_the_distributed_executor_without_a_process_group_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="^executor distributed: no torch.distributed process group"):
        run_gate(executor="distributed", families=["option_order"], rows_per_set=2, invariance=False)


def test_an_fsdp1_model_is_refused_naming_the_model(one_rank_world):
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = AutoModelForImageTextToText.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    processor = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    wrapped = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", root=ROOT, **GATE)
    with pytest.raises(UsageError, match="(?s)model: it is wrapped in FSDP1's FullyShardedDataParallel.*fully_shard"):
        callback.check_trainer(None, wrapped, processor)


def test_ranks_given_their_own_report_folders_gate_together_and_the_writing_one_names_the_others(
        one_rank_world, tmp_path, monkeypatch, caplog):
    """Two ranks' callbacks, each with a folder of its own (as ``tempfile.mkdtemp()`` on each rank gives), each told
    its rank of a world of 2 and answering the roll call through this process group's store: they gate together, not
    each alone, and rank 0, which writes, warns naming rank 1's folder and its own."""
    import logging
    from collections import Counter
    from types import SimpleNamespace

    import torch
    from transformers import TrainerControl, TrainerState

    from laya_robustness import training
    from laya_robustness.run.executors import roll_call

    monkeypatch.setattr(roll_call, "_begun", Counter())
    processor = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    folders = [tmp_path / f"rank{r}" / "robustness" for r in range(2)]
    callbacks = [RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=f, root=ROOT, **GATE)
                 for f in folders]
    for rank, callback in enumerate(callbacks):
        monkeypatch.setattr(training, "sharing_world", lambda rank=rank: (rank, 2))
        callback.on_train_begin(SimpleNamespace(eval_strategy="steps"), TrainerState(), TrainerControl(),
                                processing_class=processor)
    where = []
    with caplog.at_level(logging.WARNING, logger="laya_robustness.training"):
        for rank, callback in enumerate(callbacks):
            monkeypatch.setattr(training, "_main", lambda rank=rank: rank == 0)
            where.append(callback.where(TrainerState(global_step=2), torch.nn.Linear(2, 2)))
    assert where == [training.TOGETHER, training.TOGETHER]
    warnings = [r.getMessage() for r in caplog.records if r.name == "laya_robustness.training"]
    assert warnings == [f"robustness gate: report_dir: the ranks were given different folders (rank 1: {folders[1]}): "
                        f"rank 0 writes every evaluation's reports to {folders[0]}, and the others' stay empty (give "
                        "every rank the same report_dir: a fixed path, or one under TrainingArguments.output_dir, not "
                        "tempfile.mkdtemp() on each rank)"], warnings


def test_a_world_of_one_rank_gates_as_one_process_without_a_collective(one_rank_world, tmp_path, monkeypatch):
    """``--executor distributed`` and the callback in a world of one: every chunk is this rank's, the records a local
    run's, and no collective is called (nothing to share; after one, this rank's threaded forwards ran slower)."""
    import torch.distributed as dist

    collectives = []
    for name in ("all_gather_object", "broadcast_object_list", "all_gather", "broadcast", "barrier"):
        monkeypatch.setattr(dist, name, lambda *args, name=name, **kwargs: collectives.append(name))
    model = AutoModelForImageTextToText.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm",
                                                        attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    runs = {name: run_gate(model, processor=processor, data=ROOT / "laya_fixtures" / "rows", root=ROOT,
                           executor=name, invariance=False, report_dir=tmp_path / name, **GATE)
            for name in ("local", "distributed")}
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=tmp_path / "callback", root=ROOT,
                                  **GATE)
    gated = callback.gate(model, processor, 1)
    assert collectives == []
    assert prediction_lines(tmp_path / "distributed") == prediction_lines(tmp_path / "local")
    assert prediction_lines(tmp_path / "callback" / "checkpoint-1") == prediction_lines(tmp_path / "local")
    assert runs["distributed"].summary == runs["local"].summary == gated.summary


def test_a_ranks_chunks_are_journaled_as_it_scores_them_and_resume_scores_the_rest(one_rank_world, tmp_path,
                                                                                    monkeypatch):
    """A rank journals each chunk of its share as soon as it is scored (as a local run does), before any gather: when
    its scoring breaks, what it scored is kept, and ``resume`` scores only the rest, to the local run's records."""
    from laya_robustness.run.errors import HarnessError
    from laya_robustness.run.pipeline import chunks

    model = AutoModelForImageTextToText.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm",
                                                        attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    gate = {"data": ROOT / "laya_fixtures" / "rows", "root": ROOT, "invariance": False, "families": ["text"],
            "rows_per_set": 6, "batch_size": 2}
    run_gate(model, processor=processor, executor="local", report_dir=tmp_path / "local", **gate)
    scored, records = [], chunks.Scoring.records

    def breaks_at_the_third(self, rows):
        if len(scored) == 2:
            raise RuntimeError("injected at the third chunk")
        scored.append(len(rows))
        return records(self, rows)

    monkeypatch.setattr(chunks.Scoring, "records", breaks_at_the_third)
    journal = tmp_path / "journal"
    with pytest.raises(HarnessError, match="injected at the third chunk"):
        run_gate(model, processor=processor, executor="distributed", journal=journal, report_dir=tmp_path / "broke",
                 **gate)
    monkeypatch.setattr(chunks.Scoring, "records", lambda self, rows: scored.append(len(rows)) or records(self, rows))
    before_break, scored[:] = sum(scored), []
    run_gate(model, processor=processor, executor="distributed", journal=journal, resume=True,
             report_dir=tmp_path / "resumed", **gate)
    assert before_break > 0
    assert sum(scored) == len(prediction_lines(tmp_path / "local")) - before_break
    assert prediction_lines(tmp_path / "resumed") == prediction_lines(tmp_path / "local")
