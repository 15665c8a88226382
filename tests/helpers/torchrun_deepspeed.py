"""A DeepSpeed training job under ``torchrun`` (gloo, CPU: ``DS_ACCELERATOR=cpu``) that gates its model with
``RobustnessCallback``, run by ``tests/training/test_training_deepspeed.py``: ``python -m torch.distributed.run
--nproc_per_node 2 tests/helpers/torchrun_deepspeed.py <setup> <out>``.

Each setup is a real ``transformers.Trainer`` with ``deepspeed=<a ZeRO config>``, evaluating every 2 of 4 steps, with
``shared`` (a callback on every rank, reports in ``<out>/robustness``) and ``ranks0`` (a callback on rank 0 only,
``callbacks=[cb] if rank == 0 else []``, reports in ``<out>/rank0-only``). ``zero3``: ZeRO-3, every parameter
partitioned (``stage3_param_persistence_threshold`` 0, the model made under ``zero.Init``) and released after each
module's forward (``stage3_max_reuse_distance`` 0: else so small a model stays gathered after the Trainer's own
evaluation); the model saved with
``stage3_gather_16bit_weights_on_model_save`` to ``<out>/saved``. ``zero2``: ZeRO-2, the model whole on each rank,
saved the same way. ``zero3-killed``: ZeRO-3 with ``shared`` alone; rank 1 kills itself (SIGKILL) in its share of the
first evaluation's scoring, first writing the time to ``<out>/killed.txt``. Run by hand only (the tests run the three
above): ``zero1``, ``ddp`` (the Trainer's DDP, no DeepSpeed) and ``zero3-lora`` (ZeRO-3 with peft LoRA adapters on the
text model's attention). ``GATE_ROWS_PER_SET`` (default 3) sets the gate's rows per set, for timing it.

Each rank writes ``<out>/rank<r>.json``: per callback, the steps it gated (the failed checks it was told), its
errors, the weights' identity and the seconds each evaluation took; the rows this rank's scorer scored, and the
``torch.distributed`` collectives called while it scored them (DeepSpeed's ZeRO-3 fetches included); the bytes
ZeRO-3 gathered and this process's resident memory before and while the gate ran; after each evaluation, how many
parameters were whole here and how many DeepSpeed forward hooks the model held; the last training loss.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import deepspeed
import psutil
import torch.distributed as dist
from transformers import AutoModelForImageTextToText, AutoProcessor, Trainer, TrainingArguments

from laya_robustness.recipes.trainer_data import AnswerDataset
from laya_robustness.run.pipeline import chunks
from laya_robustness.scoring import deepspeed_zero, sharded
from laya_robustness.training import RobustnessCallback

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
GATE = {"families": ["option_order", "text"], "rows_per_set": int(os.environ.get("GATE_ROWS_PER_SET", "3"))}
STEPS, EVAL_EVERY = 4, 2
#: The ZeRO settings of each setup (the rest of the DeepSpeed config is the Trainer's "auto").
ZERO = {"zero3": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                  "stage3_prefetch_bucket_size": 0,
                  "stage3_gather_16bit_weights_on_model_save": True},
        "zero2": {"stage": 2}, "zero1": {"stage": 1}, "ddp": None}
ZERO["zero3-killed"] = ZERO["zero3-lora"] = ZERO["zero3"]

account = {"scored_rows": 0, "gathered_bytes": [], "rss_before": [], "rss_peak": [], "after_gate": [],
           "collectives_while_scoring": 0}
_records = chunks.Scoring.records
scoring = [False]


def _counted(self, rows):
    account["scored_rows"] += len(rows)
    account["rss_peak"][-1] = max(account["rss_peak"][-1], psutil.Process().memory_info().rss)
    if "KILLED_FILE" in os.environ:  # this rank dies here, saying when
        Path(os.environ["KILLED_FILE"]).write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    scoring[0] = True
    try:
        return _records(self, rows)
    finally:
        scoring[0] = False


def _watched(collective):
    """``collective`` counted when it is called while this rank scores its share (the gate's forwards)."""
    def watched(*args, **kwargs):
        account["collectives_while_scoring"] += scoring[0]
        return collective(*args, **kwargs)
    return watched


for _name in ("all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "broadcast", "barrier",
              "reduce_scatter_tensor", "all_to_all_single", "send", "recv", "isend", "irecv"):
    setattr(dist, _name, _watched(getattr(dist, _name)))


chunks.Scoring.records = _counted
_gathered = sharded.gathered


def _gathered_counted(model):
    """ZeRO-3's gather, its bytes and this process's memory while inside recorded."""
    with _gathered(model) as size:
        account["gathered_bytes"].append(size)
        account["rss_peak"][-1] = max(account["rss_peak"][-1], psutil.Process().memory_info().rss)
        yield size


sharded.gathered = __import__("contextlib").contextmanager(_gathered_counted)


class Timed(RobustnessCallback):
    """The callback with each evaluation timed, and what is whole after it counted."""

    seconds: dict

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        before = sum(p.numel() > 0 for p in model.parameters())
        account["rss_before"].append(psutil.Process().memory_info().rss)
        account["rss_peak"].append(account["rss_before"][-1])
        start = time.perf_counter()
        super().on_evaluate(args, state, control, model=model, **kwargs)
        self.seconds[state.global_step] = round(time.perf_counter() - start, 3)
        whole = sum(p.numel() > 0 for p in model.parameters())
        hooks = sum(deepspeed_zero.from_deepspeed(h) for m in model.modules()
                    for table in (m._forward_pre_hooks, m._forward_hooks) for h in table.values())
        account["after_gate"].append({"step": state.global_step, "whole_before": before, "whole_after": whole,
                                      "deepspeed_hooks": hooks})


def callback(out: Path, name: str) -> Timed:
    made = Timed(data=ROOT / "laya_fixtures" / "rows", report_dir=out / name, root=ROOT, stop_on_fail=False, **GATE)
    made.seconds = {}
    return made


def main(setup: str, out: Path) -> None:
    deepspeed.init_distributed("gloo")  # before the model is made: zero.Init partitions it as it loads
    rank = dist.get_rank()
    if setup == "zero3-killed" and rank == 1:
        os.environ["KILLED_FILE"] = str(out / "killed.txt")
    config = ZERO[setup] and {"zero_optimization": ZERO[setup], "train_micro_batch_size_per_gpu": "auto",
                              "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
                              "gradient_clipping": "auto"}
    args = TrainingArguments(str(out / "run"), max_steps=STEPS, eval_strategy="steps", eval_steps=EVAL_EVERY,
                             per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=5e-3,
                             logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True, deepspeed=config,
                             ddp_backend="gloo" if config is None else None)
    model = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
    if setup.endswith("-lora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    processor = AutoProcessor.from_pretrained(MODEL)
    callbacks = {"robustness": callback(out, "robustness")}
    if rank == 0 and setup != "zero3-killed":
        callbacks["rank0-only"] = callback(out, "rank0-only")
    account["partitioned_at_start"] = sum(p.numel() == 0 for p in model.parameters())
    account["params"] = sum(1 for _ in model.parameters())
    train = AnswerDataset(processor, rows_per_set=16, seed=1)
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      eval_dataset=AnswerDataset(processor, rows_per_set=2, seed=2), data_collator=train.collate,
                      processing_class=processor, callbacks=list(callbacks.values()))
    trainer.train()
    trainer.save_model(str(out / "saved"))  # every rank: ZeRO-3 gathers the weights to save them
    if rank == 0:
        processor.save_pretrained(out / "saved")
    account["steps"] = trainer.state.global_step
    account["last_loss"] = [e["loss"] for e in trainer.state.log_history if "loss" in e][-1]
    account["callbacks"] = {name: {"gated": {step: [f.check for f in r.failures] for step, r in cb.results.items()},
                                   "errors": cb.errors, "seconds": cb.seconds,
                                   "weights": {step: r.summary["meta"]["model"].get("weights_sha256")
                                               for step, r in cb.results.items()}}
                            for name, cb in callbacks.items()}
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **account}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
