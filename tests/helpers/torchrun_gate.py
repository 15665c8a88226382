"""A training job under ``torchrun`` (gloo, CPU) that gates its model with ``RobustnessCallback``, run by
``tests/training/test_training_distributed.py``: ``python -m torch.distributed.run --nproc_per_node 2
tests/helpers/torchrun_gate.py <setup> <out>``.

``ddp``: a real ``transformers.Trainer`` (DDP over gloo: ``use_cpu`` and ``ddp_backend="gloo"``), evaluating every 2
steps; rank 0 saves the trained model to ``<out>/saved``. ``fsdp``: the model sharded with FSDP2's ``fully_shard``
(each decoder layer, then the whole), trained by a plain loop that calls the callback's ``on_evaluate`` on every rank
every 2 steps as a Trainer would; rank 0 saves the full state dict (gathered) as a checkpoint in ``<out>/saved``.
``broken-scoring`` / ``broken-early``: two evaluations of the whole model, rank 1's gate breaking at the first (in its
share of the scoring, or before it shares anything).

Each rank writes ``<out>/rank<r>.json``: the steps it gated, the rows its scorer scored (counted by wrapping
``Scoring.records``), the report plots it drew, the verdict it was told (``stop_on_fail``'s broadcast decision), and
the weights' identity.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerControl, TrainerState

from laya_robustness.report import plots
from laya_robustness.run.pipeline import chunks
from laya_robustness.training import RobustnessCallback

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
GATE = {"families": ["option_order", "text"], "rows_per_set": 6}
STEPS, EVAL_EVERY = 4, 2

scored_rows = [0]
_records = chunks.Scoring.records


def _counted(self, rows):
    scored_rows[0] += len(rows)
    return _records(self, rows)


chunks.Scoring.records = _counted
drawn_plots = [0]


def _drawing(draw):
    def counted(curves, *args, **kwargs):
        drawn_plots[0] += 1
        return draw(curves, *args, **kwargs)
    return counted


plots.reliability_uri, plots.strength_uri = _drawing(plots.reliability_uri), _drawing(plots.strength_uri)


def trainer_ddp(out: Path, callback, model, processor) -> None:
    from transformers import Trainer, TrainingArguments

    from laya_robustness.recipes.trainer_data import AnswerDataset

    train = AnswerDataset(processor, rows_per_set=16, seed=1)
    args = TrainingArguments(str(out / "run"), max_steps=STEPS, eval_strategy="steps", eval_steps=EVAL_EVERY,
                             per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=5e-3,
                             logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True, ddp_backend="gloo")
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      eval_dataset=AnswerDataset(processor, rows_per_set=2, seed=2), data_collator=train.collate,
                      processing_class=processor, callbacks=[callback])
    trainer.train()
    if dist.get_rank() == 0:
        trainer.model.save_pretrained(out / "saved")
        processor.save_pretrained(out / "saved")


def loop_fsdp(out: Path, callback, model, processor) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    from laya_robustness.recipes.trainer_data import AnswerDataset

    for layer in model.model.text_model.layers:
        fully_shard(layer)
    fully_shard(model)
    train = AnswerDataset(processor, rows_per_set=16, seed=1)
    batch = train.collate([train[i] for i in range(dist.get_rank(), 8, dist.get_world_size())])
    optimiser = torch.optim.SGD(model.parameters(), lr=5e-3)
    state, control = TrainerState(is_world_process_zero=dist.get_rank() == 0), TrainerControl()
    callback.on_train_begin(None, state, control, model=model, processing_class=processor)
    for step in range(1, STEPS + 1):
        model.train()
        loss = model(**batch).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        state.global_step = step
        if step % EVAL_EVERY == 0:
            callback.on_evaluate(None, state, control, model=model, processing_class=processor)
    whole = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        saved = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
        saved.load_state_dict(whole)
        saved.save_pretrained(out / "saved")
        processor.save_pretrained(out / "saved")


def loop_broken(out: Path, callback, model, processor, where: str) -> None:
    """Rank 1's gate breaks (``where``: in its share of the scoring, or before it shares anything) at the first of
    two evaluations; the second is whole."""
    from laya_robustness.run.executors import distributed

    if dist.get_rank() == 1:
        if where == "scoring":
            def broken(self, rows):
                raise RuntimeError("injected on rank 1")
            chunks.Scoring.records = broken
        else:
            def broken(self, keys):
                raise RuntimeError("injected before rank 1 shared its chunks")
            distributed.SharedCells._score = broken
    state, control = TrainerState(is_world_process_zero=dist.get_rank() == 0), TrainerControl()
    for step in (1, 2):
        state.global_step = step
        callback.on_evaluate(None, state, control, model=model, processing_class=processor)
        chunks.Scoring.records, distributed.SharedCells._score = _counted, _score  # the second one whole


_score = __import__("laya_robustness.run.executors.distributed", fromlist=["SharedCells"]).SharedCells._score


def main(setup: str, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(MODEL)
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=out / "robustness", root=ROOT,
                                  stop_on_fail=False, **GATE)
    if setup.startswith("broken-"):
        loop_broken(out, callback, model, processor, setup.removeprefix("broken-"))
    else:
        {"ddp": trainer_ddp, "fsdp": loop_fsdp}[setup](out, callback, model, processor)
    told = {step: [f.check for f in result.failures] for step, result in callback.results.items()}
    identity = {step: result.summary["meta"]["model"].get("weights_sha256")
                for step, result in callback.results.items()}
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "scored_rows": scored_rows[0], "gated": told,
                                                      "errors": callback.errors, "weights": identity,
                                                      "drawn_plots": drawn_plots[0]}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
