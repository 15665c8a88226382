"""The Trainer callback never kills the training it watches, on a real ``transformers.Trainer``: a LoRA (peft) model is
gated with its adapters, with the numbers its merged, saved and reloaded model gives; inputs that cannot work (rows
that are not there, a report folder that cannot be written, no processor or another model's, a Trainer that never
calls it) are usage errors naming the argument before the first step; a gate that breaks during training is logged,
noted in that checkpoint's folder, and training goes on (or stops after that step with ``stop_on_fail``)."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("peft")

from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForImageTextToText,
    AutoProcessor,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import laya_robustness  # noqa: E402
from laya_robustness.recipes.trainer_data import AnswerDataset  # noqa: E402
from laya_robustness.run.errors import UsageError  # noqa: E402
from laya_robustness.training import INCOMPLETE_NOTE, RobustnessCallback  # noqa: E402

from helpers.records import records_by_row  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
ROWS = ROOT / "laya_fixtures" / "rows"
GATE = {"families": ["option_order"], "rows_per_set": 4}


def _model():
    return AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")


def _trainer(out: Path, model, callbacks, steps: int = 2, **overrides) -> Trainer:
    processor = AutoProcessor.from_pretrained(MODEL)
    train = AnswerDataset(processor, rows_per_set=8, seed=1)
    settings = dict(max_steps=steps, eval_strategy="steps", eval_steps=1, per_device_train_batch_size=8,
                    learning_rate=5e-3, report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                    dataloader_num_workers=0)
    settings.update(overrides)
    processing_class = settings.pop("processing_class", processor)
    return Trainer(model=model, args=TrainingArguments(str(out / "run"), **settings), train_dataset=train,
                   eval_dataset=AnswerDataset(processor, rows_per_set=1, seed=2), data_collator=train.collate,
                   processing_class=processing_class, callbacks=callbacks)


def _probabilities(logits: list[float]) -> list[float]:
    top = max(logits)
    exp = [math.exp(x - top) for x in logits]
    return [e / sum(exp) for e in exp]


def test_a_lora_model_is_gated_with_the_numbers_of_its_merged_saved_and_reloaded_model(tmp_path, monkeypatch):
    model = get_peft_model(_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                lora_dropout=0.0))
    callback = RobustnessCallback(data=ROWS, report_dir=tmp_path / "robustness", root=ROOT, **GATE)
    trainer = _trainer(tmp_path, model, [callback])
    trainer.train()
    assert sorted(callback.results) == [1, 2] and callback.errors == {}
    assert all(result.judged and result.passed is (not result.failures) for result in callback.results.values())
    lora_b = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert lora_b and any(float(p.detach().abs().max()) > 0 for p in lora_b)  # the adapters moved away from the base model
    model.merge_and_unload().save_pretrained(tmp_path / "merged")
    AutoProcessor.from_pretrained(MODEL).save_pretrained(tmp_path / "merged")
    monkeypatch.chdir(ROOT)
    laya_robustness.run_gate(str(tmp_path / "merged"), invariance=False, report_dir=tmp_path / "again", **GATE)
    laya_robustness.run_gate(str(MODEL), invariance=False, report_dir=tmp_path / "base", **GATE)
    in_training = records_by_row(tmp_path / "robustness" / "checkpoint-2")
    reloaded = records_by_row(tmp_path / "again")
    base = records_by_row(tmp_path / "base")
    assert set(in_training) == set(reloaded) == set(base) and len(reloaded) > 40
    merged, adapted = _largest_dp(in_training, reloaded), _largest_dp(in_training, base)
    for row_id, record in reloaded.items():
        assert in_training[row_id]["argmax"] == record["argmax"], row_id
    # the merged weights W + BA round differently from W x + B(A x), in the 5th decimal of a probability at most,
    # and the adapters' own effect (against the base model) is over a hundred times that
    print(f"\nlargest |dp|: merged and reloaded {merged:.2e}; the base model {adapted:.2e}")
    assert merged <= 1e-4 and adapted > 100 * merged, (merged, adapted)


def test_a_lora_models_reports_name_its_base_and_its_adapter_and_hash_both(tmp_path, monkeypatch):
    from laya_robustness.weights import weight_hashes

    model = get_peft_model(_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"],
                                                lora_dropout=0.0, init_lora_weights=False))  # adapters not at 0
    monkeypatch.chdir(ROOT)
    result = laya_robustness.run_gate(model, processor=AutoProcessor.from_pretrained(MODEL), invariance=False,
                                      report_dir=tmp_path / "r", **GATE)
    identity = json.loads((tmp_path / "r" / "summary.json").read_text())["meta"]["model"]
    assert result.judged and identity["adapters"] == {"default": {
        "kind": "LORA", "base_model": str(MODEL), "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    hashes = identity["weights_sha256"]
    assert hashes["base"] == weight_hashes(MODEL)["tensors"]  # the base checkpoint's own digest: its weights, frozen
    assert len({hashes["tensors"], hashes["base"], hashes["adapter"]}) == 3
    again = get_peft_model(_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"],
                                                lora_dropout=0.0, init_lora_weights=False))
    from laya_robustness.weights import model_weight_hashes

    assert model_weight_hashes(again.get_base_model())["adapter"] != hashes["adapter"]  # other adapter weights


def _largest_dp(a: dict, b: dict) -> float:
    """The largest difference of an option's probability between two runs' records of the same rows."""
    return max(abs(x - y) for row_id in a
               for x, y in zip(_probabilities(a[row_id]["logits"]), _probabilities(b[row_id]["logits"])))


def test_a_folder_of_rows_that_is_not_there_is_refused_when_the_callback_is_made(tmp_path):
    with pytest.raises(UsageError, match=r"^data: no rows at .*missing"):
        RobustnessCallback(data=tmp_path / "missing", report_dir=tmp_path / "r")


def test_a_report_folder_that_cannot_be_written_is_refused_when_the_callback_is_made(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(UsageError, match=r"^report_dir: cannot write in .*a-file/robustness"):
        RobustnessCallback(data=ROWS, report_dir=tmp_path / "a-file" / "robustness", root=ROOT, **GATE)


class Steps(TrainerCallback):
    """The training steps that ran (before the robustness callback is asked anything)."""

    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


@pytest.mark.parametrize("case", ["no processor", "another model's processor", "never evaluates", "never saves"])
def test_a_trainer_the_callback_cannot_gate_is_refused_before_the_first_step(tmp_path, case):
    every = "save" if case == "never saves" else "evaluate"
    callback = RobustnessCallback(data=ROWS, report_dir=tmp_path / "r", root=ROOT, every=every, **GATE)
    overrides, expected = {}, r"^processor: the callback needs the model's processor"
    if case == "no processor":
        overrides["processing_class"] = None
    elif case == "another model's processor":
        overrides["processing_class"] = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-clip")
        expected = r"^processor: CLIPProcessor is not the processor of a model of type 'idefics3'"
    elif case == "never evaluates":
        overrides["eval_strategy"], expected = "no", r"^every: 'evaluate' gates at each evaluate, .*eval_strategy"
    else:
        expected = r"^every: 'save' gates at each save, .*save_strategy is 'no'"
    steps = Steps()
    trainer = _trainer(tmp_path, _model(), [steps, callback], **overrides)
    with pytest.raises(UsageError, match=expected):
        trainer.train()
    assert steps.steps == [] and trainer.state.global_step == 0 and callback.results == {}


class BreakTheGateAt(TrainerCallback):
    """A fault a real part will not make on demand: the vision encoder raises (as a GPU running out of memory would)
    while the robustness gate scores at ``step``; the training's own forwards never see it."""

    def __init__(self, model, step: int):
        self.step, self.armed = step, False
        model.model.vision_model.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        if self.armed:
            raise RuntimeError("out of memory (injected while the gate scores)")

    def on_evaluate(self, args, state, control, **kwargs):
        self.armed = state.global_step == self.step  # runs just before the robustness callback's on_evaluate

    def on_step_begin(self, args, state, control, **kwargs):
        self.armed = False


@pytest.mark.parametrize("stop_on_fail", [False, True])
def test_a_gate_that_breaks_during_training_is_noted_and_training_goes_on(tmp_path, caplog, stop_on_fail):
    model = _model()
    callback = RobustnessCallback(data=ROWS, report_dir=tmp_path / "robustness", root=ROOT, stop_on_fail=stop_on_fail,
                                  **GATE)
    steps = Steps()
    trainer = _trainer(tmp_path, model, [steps, BreakTheGateAt(model, 1), callback], steps=3, save_strategy="steps",
                       save_steps=1)
    trainer.train()
    assert list(callback.errors) == [1] and "out of memory (injected" in callback.errors[1]
    note = (tmp_path / "robustness" / "checkpoint-1" / INCOMPLETE_NOTE).read_text()
    assert note.startswith("the robustness gate at step 1 did not finish: HarnessError: scoring ") and "injected" in note
    assert "robustness gate at step 1 did not finish (training goes on)" in caplog.text
    assert (tmp_path / "run" / "checkpoint-1").is_dir()  # the Trainer saved the step the gate broke at
    if stop_on_fail:
        assert steps.steps == [1] and callback.results == {}
    else:
        assert steps.steps == [1, 2, 3] and sorted(callback.results) == [2, 3]
        assert all(r.judged for r in callback.results.values())


def test_the_wrappers_around_a_model_are_unwrapped_to_the_transformers_model():
    import torch

    from laya_robustness.scoring.in_memory import unwrapped

    model = _model()
    assert unwrapped(model) is model and unwrapped(torch.compile(model)) is model

    class Holder(torch.nn.Module):  # how DistributedDataParallel and FSDP1 hold the module they wrap
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert unwrapped(Holder(torch.compile(model))) is model
    lora = get_peft_model(_model(), LoraConfig(r=2, target_modules=["q_proj"]))
    assert unwrapped(lora) is lora.get_base_model() and unwrapped(Holder(lora)) is lora.get_base_model()
