"""``RobustnessCallback(stop_on_fail=...)`` on a real ``transformers.Trainer``: an unchanged model (learning rate 0)
gets byte-identical records, so the same verdict, at every evaluation; a failure stops at once (True), at its second
evaluation in a row ("confirmed"), or not at all unless the model regressed against a baseline ("regression");
a policy that cannot work is a usage error naming ``stop_on_fail``."""

import gzip
import logging
from pathlib import Path

import pytest
from transformers import AutoModelForImageTextToText, AutoProcessor, Trainer, TrainerCallback, TrainingArguments

import laya_robustness
from laya_robustness.recipes.trainer_data import AnswerDataset
from laya_robustness.run.errors import UsageError
from laya_robustness.stopping import decide
from laya_robustness.training import RobustnessCallback

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
ROWS = ROOT / "laya_fixtures" / "rows"
#: A gate the embedded model fails at every evaluation (its text flips are known limitations, not declared here).
FAILING = {"families": ["text"], "rows_per_set": 6}


class Steps(TrainerCallback):
    """The steps the Trainer ran."""

    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def _train(out: Path, callback, steps: int = 3, learning_rate: float = 0.0) -> list[int]:
    model = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(MODEL)
    train = AnswerDataset(processor, rows_per_set=8, seed=1)
    args = TrainingArguments(str(out / "run"), max_steps=steps, eval_strategy="steps", eval_steps=1,
                             per_device_train_batch_size=8, learning_rate=learning_rate, weight_decay=0.0,
                             report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                             dataloader_num_workers=0)
    ran = Steps()
    Trainer(model=model, args=args, train_dataset=train, eval_dataset=AnswerDataset(processor, rows_per_set=1, seed=2),
            data_collator=train.collate, processing_class=processor, callbacks=[ran, callback]).train()
    return ran.steps


def _callback(out: Path, **options) -> RobustnessCallback:
    return RobustnessCallback(data=ROWS, report_dir=out / "robustness", root=ROOT, **{**FAILING, **options})


def test_an_unchanged_model_gets_the_same_records_and_verdict_at_every_evaluation(tmp_path):
    callback = _callback(tmp_path)
    assert _train(tmp_path, callback) == [1, 2, 3]
    records = [gzip.decompress((tmp_path / "robustness" / f"checkpoint-{s}" / "predictions.jsonl.gz").read_bytes())
               for s in (1, 2, 3)]
    assert records[0] == records[1] == records[2]
    verdicts = [[(f.family, f.dataset, f.check) for f in callback.results[s].failures] for s in (1, 2, 3)]
    assert verdicts[0] and verdicts[0] == verdicts[1] == verdicts[2]


@pytest.mark.parametrize(("policy", "ran"), [(True, [1]), ("failure", [1]), ("confirmed", [1, 2]), (False, [1, 2, 3])])
def test_a_failing_model_stops_when_its_policy_says(tmp_path, policy, ran, caplog):
    """... and each warning names the folder of that evaluation's reports: the failed checks' its summary.md, the
    stop's the folder."""
    with caplog.at_level(logging.WARNING, logger="laya_robustness.training"):
        assert _train(tmp_path, _callback(tmp_path, stop_on_fail=policy)) == ran
    warnings = [r.getMessage() for r in caplog.records if r.name == "laya_robustness.training"]
    failed = [w for w in warnings if w.startswith("robustness gate at step ")]
    assert [w.split()[4].rstrip(":") for w in failed] == [str(step) for step in ran], warnings
    for step, warning in zip(ran, failed):
        assert warning.endswith(f" {tmp_path / 'robustness' / f'checkpoint-{step}' / 'summary.md'}"), warning
    stopped = [w for w in warnings if "training stopped" in w]
    assert stopped == [f"robustness gate: training stopped at step {ran[-1]} (stop_on_fail={policy!r}); reports in "
                       f"{tmp_path / 'robustness' / f'checkpoint-{ran[-1]}'}"] * bool(policy), warnings


def test_regression_stops_only_on_a_regression_against_the_baseline(tmp_path):
    model = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(MODEL)
    laya_robustness.run_gate(model, processor=processor, data=ROWS, root=ROOT, invariance=False,
                             report_dir=tmp_path / "release", **FAILING)
    baseline = tmp_path / "release" / "predictions.jsonl.gz"
    unchanged = _callback(tmp_path / "unchanged", stop_on_fail="regression", baseline=baseline)
    assert _train(tmp_path / "unchanged", unchanged) == [1, 2, 3]  # text fails, as it did in the release
    assert unchanged.results[1].failures
    broken = _callback(tmp_path / "broken", stop_on_fail="regression", baseline=baseline)
    assert _train(tmp_path / "broken", broken, learning_rate=0.5) == [1]
    assert {f.check for f in broken.results[1].failures} & {"max_regression", "max_flip_regression"}


@pytest.mark.parametrize(("policy", "options", "words"), [
    ("sometimes", {}, "stop_on_fail: 'sometimes' is not one of False, True, 'failure', 'confirmed', 'regression'"),
    (2, {}, "stop_on_fail: 2 is not one of"),
    ("regression", {}, "stop_on_fail: 'regression' stops on a regression against a baseline, and no baseline is given"),
])
def test_a_policy_that_cannot_work_is_a_usage_error_naming_it(policy, options, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        RobustnessCallback(data=ROWS, root=ROOT, stop_on_fail=policy, **options)


def test_the_decision_of_each_policy():
    text, other, regressed = "text/a max_flip", "x/b min_acc", "text/all max_regression"
    assert [decide(p, {text}, set()) for p in (False, True, "failure", "confirmed", "regression")] == [
        False, True, True, False, False]
    assert decide("confirmed", {text}, {text}) and not decide("confirmed", {text}, {other})
    assert decide("regression", {regressed}, set()) and decide("regression", {"the gate itself"}, set())
    assert not any(decide(p, set(), {text}) for p in (True, "confirmed", "regression"))
