"""``RobustnessCallback`` under DeepSpeed for real: ``torchrun`` worlds of 2 CPU ranks (gloo, ``DS_ACCELERATOR=cpu``)
training a real Trainer with ``deepspeed=<a ZeRO config>`` (``tests/helpers/torchrun_deepspeed.py``), gated at two
evaluations. ZeRO-3 (every parameter partitioned) and ZeRO-2: every rank scores a share, the records and the weights'
identity are those of the model DeepSpeed saved, gated alone in one process, no rank is left behind, and under ZeRO-3
the partitions and DeepSpeed's hooks are as they were after each evaluation. A callback on rank 0 only gates there
alone (ZeRO-2: the model is whole there) or is refused, logged, with training going on (ZeRO-3). A rank killed while
the ranks gate ends the world at once, the reason noted in the evaluation's ``incomplete.txt``. Also the refusals and
bounds that need no world of two: a tensor-parallel model, a gather with no room, SIGTERM while gating."""

import importlib.util
import json
import signal
import time
from pathlib import Path

import pytest
from transformers import AutoModelForImageTextToText, AutoProcessor

from laya_robustness.run.errors import UsageError
from laya_robustness.training import RobustnessCallback

from helpers.paths import ROOT, TESTS
from helpers.records import prediction_lines
from helpers.torchrun_parts import gated_alone, torchrun

pytestmark = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                reason="DeepSpeed is not installed (pip install -e '.[training]')")

PROGRAM = TESTS / "helpers" / "torchrun_deepspeed.py"
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
GATE = {"families": ["option_order", "text"], "rows_per_set": 3}
#: Seconds a world may take before the test says it hung (one takes about 35 s here, DeepSpeed's import included;
#: the first on a machine also compiles DeepSpeed's shared-memory op, once).
WORLD_TIMEOUT = 400
#: Seconds the other rank may take to end once one was killed (it ended in under a second here).
KILLED_BOUND = 60
#: DeepSpeed on the CPU, each rank on one thread (as torchrun gives it).
ENV = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module", params=["zero3", "zero2"])
def world(request, tmp_path_factory):
    """(setup, its folder, each rank's account, the folder of the saved model gated alone in one process)."""
    out = tmp_path_factory.mktemp(request.param)
    torchrun(PROGRAM, request.param, out, WORLD_TIMEOUT, **ENV)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return request.param, out, ranks, gated_alone(out / "saved", out / "alone", 4, **GATE)


def test_every_rank_scores_a_share_to_the_saved_models_records_and_identity(world):
    """Both evaluations gated on both ranks, each scoring a share; the last one's records byte for byte, and the
    weights' identity, those of the model DeepSpeed saved, gated alone; training went on to its last step."""
    setup, out, ranks, alone = world
    shared = [r["callbacks"]["robustness"] for r in ranks]
    assert [sorted(c["gated"]) for c in shared] == [["2", "4"]] * 2 and [c["errors"] for c in shared] == [{}, {}]
    assert ranks[1]["scored_rows"] > 0 and ranks[0]["scored_rows"] > 0
    assert prediction_lines(out / "robustness" / "checkpoint-4") == prediction_lines(alone)
    saved = json.loads((alone / "summary.json").read_text())["meta"]["model"]["weights_sha256"]
    assert shared[0]["weights"]["4"] == shared[1]["weights"]["4"] == saved
    assert shared[0]["weights"]["2"] != saved  # the model trained between the evaluations
    assert [r["steps"] for r in ranks] == [4, 4] and ranks[0]["last_loss"] == ranks[1]["last_loss"]


def test_zero3_gathers_every_partition_for_the_gate_forwards_free_of_collectives_and_puts_it_back(world):
    """ZeRO-3: every parameter partitioned from the start; at each evaluation the gate gathered the whole weights (the
    saved checkpoint's bytes) on each rank, no rank made a collective while it scored (DeepSpeed's fetches
    included), and after it every parameter is partitioned again and DeepSpeed's hooks are all back. ZeRO-2: the
    weights whole throughout, nothing gathered, the engine's hooks back."""
    setup, out, ranks, _ = world
    from safetensors.torch import load_file

    whole = sum(t.numel() * t.element_size() for t in load_file(out / "saved" / "model.safetensors").values())
    assert [r["collectives_while_scoring"] for r in ranks] == [0, 0]
    for rank in ranks:
        after = rank["after_gate"]
        hooks = {a["deepspeed_hooks"] for a in after}
        assert len(hooks) == 1 and hooks.pop() > 0
        if setup == "zero3":
            assert rank["partitioned_at_start"] == rank["params"]
            assert rank["gathered_bytes"] == [whole, whole]
            assert {(a["whole_before"], a["whole_after"]) for a in after} == {(0, 0)}
        else:
            assert rank["gathered_bytes"] == [] and {a["whole_after"] for a in after} == {rank["params"]}


def test_a_callback_on_rank_0_only_gates_there_alone_or_is_refused_and_training_goes_on(world):
    """``callbacks=[cb] if rank == 0 else []``: with the weights whole (ZeRO-2) rank 0 gates alone, as one process, to
    the shared callback's records; with them partitioned (ZeRO-3) it is refused at each evaluation, logged and noted,
    and no collective is made: training goes on to its last step."""
    setup, out, ranks, _ = world
    only = ranks[0]["callbacks"]["rank0-only"]
    assert "rank0-only" not in ranks[1]["callbacks"] and [r["steps"] for r in ranks] == [4, 4]
    if setup == "zero2":
        assert only["errors"] == {} and sorted(only["gated"]) == ["2", "4"]
        for step in (2, 4):
            assert (prediction_lines(out / "rank0-only" / f"checkpoint-{step}") ==
                    prediction_lines(out / "robustness" / f"checkpoint-{step}"))
        return
    assert sorted(only["errors"]) == ["2", "4"] and only["gated"] == {}
    for step in (2, 4):
        note = (out / "rank0-only" / f"checkpoint-{step}" / "incomplete.txt").read_text()
        assert "sharded over the ranks (zero3)" in note and "on rank 0 of 2 only" in note
        assert "callbacks=[callback] on every rank" in note


def test_a_rank_killed_while_gating_ends_the_world_with_the_reason_noted(tmp_path):
    """Rank 1 is killed (SIGKILL) in its share of the first evaluation's scoring under ZeRO-3: the launcher ends rank
    0 within a bounded time, and rank 0 notes first why its evaluation did not finish."""
    done = torchrun(PROGRAM, "zero3-killed", tmp_path, WORLD_TIMEOUT, check=False, **ENV)
    ended = time.time()
    assert done.returncode != 0
    assert ended - float((tmp_path / "killed.txt").read_text()) < KILLED_BOUND
    note = (tmp_path / "robustness" / "checkpoint-2" / "incomplete.txt").read_text()
    assert "did not finish" in note and ("SIGTERM" in note or "lost a rank" in note)


def test_a_tensor_parallel_model_is_refused_naming_the_model(one_rank_world):
    """Parameters that are DTensors no FSDP2 module holds (tensor parallelism) cannot be gathered by the gate: a
    ``UsageError`` naming the model at ``on_train_begin``, saying what to train with."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    model = AutoModelForImageTextToText.from_pretrained(MODEL)
    processor = AutoProcessor.from_pretrained(MODEL)
    parallelize_module(model.model.text_model.layers[0].mlp, init_device_mesh("cpu", (1,)),
                       {"up_proj": ColwiseParallel()})
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", root=ROOT, **GATE)
    with pytest.raises(UsageError, match=r"(?s)^model: 1 of its parameters are not whole on this rank .*up_proj.*"
                                         r"fully_shard.*DeepSpeed ZeRO"):
        callback.check_trainer(None, model, processor)


def test_the_first_rank_to_read_the_roll_call_decides_for_every_rank(one_rank_world):
    """A roll call of a world of two where only this rank said it holds the callback: read without waiting, rank 0
    alone holds it; a rank that says so after the decision reads the same decision (no two ranks can disagree)."""
    from laya_robustness.run.executors.roll_call import RollCall

    call = RollCall("a report folder", 0, 2)
    first = call.read(wait=False)
    call.store.set(f"{call.key}/rank-1", "1")  # rank 1 says it holds it, too late
    assert first.holders == call.read(wait=False).holders == (0,) and not first.every_rank
    again = RollCall("a report folder", 0, 1)  # the next train() of the same callback: a roll call of its own
    assert again.key != call.key and again.read().every_rank


def test_a_gather_with_no_room_is_refused_on_every_rank_before_gathering(one_rank_world):
    """ZeRO-3 parameters whose whole size exceeds the free memory: ``GatherError`` naming the size and the rank,
    before any gather."""
    import torch

    from laya_robustness.scoring.deepspeed_zero import GatherError, room

    param = torch.nn.Parameter(torch.empty(0))
    param.ds_id, param.ds_numel = 0, 2**60
    with pytest.raises(GatherError, match=r"needs \d+ MiB on each rank; rank 0: \d+ MiB free"):
        room([param], torch.device("cpu"))


def test_sigterm_while_gating_is_raised_then_delivered_again_once_noted():
    """SIGTERM inside ``ended_by_launcher`` raises ``Terminated`` naming the step; once held, a second one waits; on
    leaving, the signal reaches the handler that was there before, once."""
    from laya_robustness.run.executors.launcher import Terminated, ended_by_launcher

    delivered = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: delivered.append(signum))
    try:
        with ended_by_launcher(7) as hold:
            with pytest.raises(Terminated, match="SIGTERM reached this rank while the gate ran at step 7"):
                signal.raise_signal(signal.SIGTERM)
                time.sleep(1)
            hold()
            signal.raise_signal(signal.SIGTERM)
            assert delivered == []
        assert delivered == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
