"""``RobustnessCallback`` in a real ``transformers.Trainer``: the embedded tiny SmolVLM fine-tuned for a few steps with
``report_to=["tensorboard", "mlflow", "wandb"]``, the robustness metrics read back at every evaluation with TensorBoard's
own reader, with ``MlflowClient`` from MLflow's local file store and with W&B's own datastore reader from the
offline run's file,
the last ones equal to the gate on the model saved and loaded back; ``trend`` over the callback's folders, its
paired changes recomputed here from the records; what the Trainer prints, one short line per evaluation."""

import contextlib
import io
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb.sdk.internal.datastore", reason="W&B's reader of an offline run's file (wandb < 0.30)")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from transformers import AutoModelForImageTextToText, AutoProcessor, Trainer, TrainingArguments  # noqa: E402

import laya_robustness  # noqa: E402
from laya_robustness.recipes.trainer_data import AnswerDataset  # noqa: E402
from laya_robustness.report.trend import read_checkpoints, trend_html, trend_rows, trend_table  # noqa: E402
from laya_robustness.run.errors import UsageError  # noqa: E402
from laya_robustness.training import (  # noqa: E402
    CONSOLE_WIDTH,
    RobustnessCallback,
    ShortPrinterCallback,
    ShortProgressCallback,
    logged_metrics,
)

from helpers.records import read_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
#: The gate at each evaluation: two families, a few rows per set.
GATE = {"families": ["option_order", "text"], "rows_per_set": 6}
STEPS, EVAL_EVERY = 6, 2
MLFLOW_EXPERIMENT = "robustness-gate"
WANDB_PROJECT = "robustness-gate"
#: What every evaluation logs, as each tracker is checked for.
LOGGED = ("robustness/option_order/colour_choice/flip", "robustness/text/count_choice/acc",
          "robustness/orig/exists_yesno/acc", "robustness/failed_checks")


class StepClock:
    """Seconds spent in training steps and in the robustness callback's evaluations (and, once trained, what the
    Trainer printed: ``console``)."""

    def __init__(self, callback):
        self.callback, self.gates, self.modes = callback, [], []
        gate = callback.gate

        def timed(model, *args, **kwargs):
            started, mode = time.perf_counter(), model.training
            try:
                return gate(model, *args, **kwargs)
            finally:
                self.gates.append(time.perf_counter() - started)
                self.modes.append((mode, model.training))

        callback.gate = timed


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def trained(tmp_path_factory, monkeypatch_module):
    """A few steps of a real Trainer with the callback: (its folder, the callback, the trainer, the step clock)."""
    out = tmp_path_factory.mktemp("trainer")
    monkeypatch_module.setenv("TENSORBOARD_LOGGING_DIR", str(out / "tb"))  # where TensorBoardCallback writes
    monkeypatch_module.setenv("MLFLOW_TRACKING_URI", (out / "mlruns").as_uri())  # MLflow's local file store,
    monkeypatch_module.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # which MLflow 3.18 refuses unless allowed
    monkeypatch_module.setenv("MLFLOW_EXPERIMENT_NAME", MLFLOW_EXPERIMENT)
    monkeypatch_module.setenv("WANDB_MODE", "offline")  # W&B's run file on disk, nothing sent anywhere
    monkeypatch_module.setenv("WANDB_DIR", str(out / "wandb"))
    monkeypatch_module.setenv("WANDB_PROJECT", WANDB_PROJECT)
    monkeypatch_module.setenv("WANDB_SILENT", "true")
    (out / "wandb").mkdir()
    # eager attention, the gate's default: a row's scores do not depend on its batch (sdpa moves them by ~1e-6)
    model = AutoModelForImageTextToText.from_pretrained(MODEL, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(MODEL)
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=out / "robustness", root=ROOT,
                                  **GATE)
    clock = StepClock(callback)
    train = AnswerDataset(processor, rows_per_set=16, seed=1)
    args = TrainingArguments(str(out / "run"), max_steps=STEPS, eval_strategy="steps", eval_steps=EVAL_EVERY,
                             per_device_train_batch_size=8, per_device_eval_batch_size=8, learning_rate=5e-3,
                             logging_steps=1, report_to=["tensorboard", "mlflow", "wandb"], save_strategy="no", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=AnswerDataset(processor, rows_per_set=2,
                                                                                           seed=2),
                      data_collator=train.collate, processing_class=processor, callbacks=[callback])
    started, printed = time.perf_counter(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.train()
    import wandb

    wandb.finish()  # the Trainer leaves its W&B run open: closing it writes the run's file to its end
    clock.total, clock.console = time.perf_counter() - started, printed.getvalue()
    return out, callback, trainer, clock


def _scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar TensorBoard's own reader finds under ``folder``: logged key -> step -> value (the Trainer's
    TensorBoard integration files a key that is no ``eval_`` metric under ``train/``)."""
    out: dict = defaultdict(dict)
    for events in folder.rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            for event in accumulator.Scalars(tag):
                out[tag.removeprefix("train/")][event.step] = event.value
    return out


def test_tensorboard_holds_the_robustness_scalars_at_every_evaluation(trained):
    out, callback, _, clock = trained
    scalars = _scalars(out / "tb")
    steps = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    robustness = {tag: by_step for tag, by_step in scalars.items() if tag.startswith("robustness/")}
    for tag in LOGGED:
        assert sorted(robustness[tag]) == steps, (tag, sorted(robustness))
    assert sorted(callback.results) == steps and len(clock.gates) == len(steps)
    for step in steps:  # each evaluation's reports, in the Trainer's own naming
        assert (out / "robustness" / f"checkpoint-{step}" / "summary.json").is_file()
    # the cost of an evaluation against a training step (printed for the record: -s shows it)
    train_step = (clock.total - sum(clock.gates)) / STEPS
    print(f"\ncallback per evaluation {sum(clock.gates[1:]) / (len(steps) - 1):.2f} s (first {clock.gates[0]:.2f} s, "
          f"reading rows and building variants); a training step with its evaluation loss {train_step:.2f} s")


def test_mlflow_holds_the_robustness_metrics_at_every_evaluation(trained):
    """Read back with MLflow's own client from the local file store the Trainer's MLflow integration wrote."""
    from mlflow.tracking import MlflowClient

    out, callback, _, _ = trained
    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    experiment = client.get_experiment_by_name(MLFLOW_EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id])
    steps = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    for key in LOGGED:
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(m.step for m in history) == steps, (key, history)
    flips = {m.step: m.value for m in client.get_metric_history(run.info.run_id, LOGGED[0])}
    for step in steps:  # the very numbers of each evaluation's reports
        summary = json.loads((out / "robustness" / f"checkpoint-{step}" / "summary.json").read_text())
        assert flips[step] == pytest.approx(summary["families"]["option_order"]["colour_choice"]["flip"], abs=1e-12)


def _wandb_history(folder: Path) -> list[dict]:
    """Every history row of the offline W&B run under ``folder``, read with W&B's own datastore reader and record
    type (``wandb.sdk.internal.datastore``, ``wandb_internal_pb2.Record``)."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    (path,) = folder.rglob("run-*.wandb")
    store, rows = DataStore(), []
    store.open_for_scan(str(path))
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def test_wandb_holds_the_robustness_metrics_at_every_evaluation(trained):
    """Read back from the offline run's file the Trainer's W&B integration wrote (it files them under ``train/``)."""
    out, _, _, _ = trained
    rows = [row for row in _wandb_history(out / "wandb") if f"train/{LOGGED[-1]}" in row]
    steps = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert [row["train/global_step"] for row in rows] == steps
    for row, step in zip(rows, steps):
        assert all(f"train/{key}" in row for key in LOGGED), sorted(row)
        summary = json.loads((out / "robustness" / f"checkpoint-{step}" / "summary.json").read_text())
        assert row[f"train/{LOGGED[0]}"] == pytest.approx(summary["families"]["option_order"]["colour_choice"]["flip"],
                                                          abs=1e-12)


def test_the_last_logged_numbers_are_the_gates_on_the_saved_model(trained, tmp_path, monkeypatch):
    out, callback, trainer, _ = trained
    trainer.save_model(tmp_path / "saved")
    monkeypatch.chdir(ROOT)
    again = laya_robustness.run_gate(str(tmp_path / "saved"), invariance=False, **GATE)
    last = callback.results[STEPS]
    assert json.loads(json.dumps(last.summary["families"])) == again.summary["families"]
    assert last.summary["meta"]["model"]["weights_sha256"] == again.summary["meta"]["model"]["weights_sha256"]
    logged = {tag: by_step[STEPS] for tag, by_step in _scalars(out / "tb").items()
              if tag.startswith("robustness/") and STEPS in by_step}
    expected = laya_robustness.training.logged_metrics(again)
    assert set(logged) == set(expected)
    for tag, value in expected.items():  # TensorBoard keeps float32
        assert math.isclose(logged[tag], value, rel_tol=1e-6, abs_tol=1e-7), tag


def test_the_console_shows_one_short_line_per_evaluation_and_every_number_is_still_logged(trained):
    out, callback, trainer, clock = trained
    lines = clock.console.splitlines()
    ours = [line for line in lines if line.startswith("robustness gate, step ")]
    steps = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert [int(line.split()[3].rstrip(":")) for line in ours] == steps, lines
    for line, step in zip(ours, steps):  # the numbers fit in the width, then the folder of that evaluation, whole
        numbers, folder = line.split("; reports in ")
        assert len(numbers) <= CONSOLE_WIDTH and "; worst: " in numbers, line
        assert folder == str(out / "robustness" / f"checkpoint-{step}"), line
    assert not any("'robustness/" in line for line in lines)  # the dict of numbers is not printed
    others = [line for line in lines if line not in ours]
    assert max(map(len, others)) < 150, max(others, key=len)  # the Trainer's own lines (its eval loss) are ~135
    assert [type(c) for c in trainer.callback_handler.callbacks].count(ShortPrinterCallback) == 1
    for step in steps:  # the history (and TensorBoard, above) has every number
        (logged,) = [e for e in trainer.state.log_history if e.get("step") == step and "robustness/failed_checks" in e]
        assert {k: v for k, v in logged.items() if k.startswith("robustness/")} == logged_metrics(callback.results[step])


def test_a_callback_added_later_shortens_the_progress_bars_lines(tmp_path, capsys):
    """With the progress bar (the Trainer's default printer) and the callback added after the Trainer is made."""
    from transformers import TrainerControl

    processor = AutoProcessor.from_pretrained(MODEL)
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to="none", use_cpu=True)
    trainer = Trainer(model=AutoModelForImageTextToText.from_pretrained(MODEL), args=args, processing_class=processor)
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=tmp_path / "r", root=ROOT,
                                  every="save", trainer=trainer, **GATE)
    trainer.add_callback(callback)
    trainer.state.max_steps = 1
    trainer.callback_handler.on_train_begin(args, trainer.state, TrainerControl())
    (bar,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, ShortProgressCallback)]
    assert bar.training_bar is not None  # its state carried over
    metrics = {f"robustness/text/set_{i}/{m}": i / 10 for i in range(9) for m in ("acc", "delta", "flip")}
    callback._log(trainer.state, {**metrics, "robustness/failed_checks": 2.0})
    trainer.log({"loss": 1.5})
    trainer.callback_handler.on_train_end(args, trainer.state, TrainerControl())
    printed = capsys.readouterr().out.splitlines()
    numbers, folder = printed[0].split("; reports in ")
    assert numbers.startswith("robustness gate, step 0: 2 failed checks; worst: text/set_0/acc 0.000, "
                              "text/set_8/flip 0.800") and len(numbers) <= CONSOLE_WIDTH, printed
    assert folder == str(tmp_path / "r" / "checkpoint-0"), printed
    assert printed[1].startswith("{'loss': '1.5'") and len(printed) == 2, printed  # the rest as the Trainer prints it
    assert {k: v for k, v in trainer.state.log_history[0].items() if k.startswith("robustness/")} == {
        **metrics, "robustness/failed_checks": 2.0}


def test_the_model_trains_on_in_the_mode_it_had(trained, tmp_path):
    _, callback, trainer, clock = trained
    assert all(before == after for before, after in clock.modes)  # the callback put back the Trainer's mode
    assert len([e["loss"] for e in trainer.state.log_history if "loss" in e]) == STEPS
    model = trainer.model.train()  # in train mode, as a callback on a save finds it
    callback.gate(model, trainer.processing_class, STEPS + 1)
    assert model.training is True and all(m.training for m in model.modules())


def _rows_diff(now: list[dict], before: list[dict], family: str, dataset: str) -> float:
    """(rows right now and wrong before - the other way) / matched rows of one cell: recomputed."""
    earlier = {(r["dataset"], r["row_id"]): r for r in before}
    pairs = [(r["argmax"] == r["label"], earlier[(r["dataset"], r["row_id"])])
             for r in now if r["family"] == family and r["dataset"] == dataset and (r["dataset"], r["row_id"]) in earlier]
    pairs = [(a, b["argmax"] == b["label"]) for a, b in pairs]
    return (sum(a and not b for a, b in pairs) - sum(b and not a for a, b in pairs)) / len(pairs)


def _acc_diff(now: list[dict], before: list[dict], family: str, dataset: str) -> float:
    """The mean over groups of (accuracy now - accuracy before) on the matched rows of one cell: recomputed."""
    earlier = {(r["dataset"], r["row_id"]): r for r in before}
    groups: dict = defaultdict(lambda: [[], []])
    for r in now:
        if r["family"] != family or r["dataset"] != dataset or (r["dataset"], r["row_id"]) not in earlier:
            continue
        b = earlier[(r["dataset"], r["row_id"])]
        groups[r["group_id"]][0].append(r["argmax"] == r["label"])
        groups[r["group_id"]][1].append(b["argmax"] == b["label"])
    return sum(sum(a) / len(a) - sum(b) / len(b) for a, b in groups.values()) / len(groups)


def test_trend_over_the_callbacks_folders_recomputed_from_the_records(trained, tmp_path):
    out, _, _, _ = trained
    folders = [out / "robustness" / f"checkpoint-{step}" for step in (6, 2, 4)]  # their steps sort them
    checkpoints = read_checkpoints(folders)
    assert [c.step for c in checkpoints] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    rows = trend_rows(checkpoints)
    records = [read_records(c.folder) for c in checkpoints]
    checked = 0
    for row in rows:
        if row["metric"] != "acc" or row["family"] == "orig":
            continue
        for i, change in enumerate(row["changes"]):
            exact = change["method"] == "exact McNemar"  # few rows changed: the rows' change and exact interval
            recomputed = (_rows_diff if exact else _acc_diff)(records[i + 1], records[i], row["family"], row["dataset"])
            assert change["diff"] == pytest.approx(recomputed, abs=1e-6)  # the summary keeps 6 d.p.
            lo, hi = change["ci"]
            assert lo <= change["diff"] <= hi
            if exact:  # its interval inverts the same exact test: they say the same
                assert change["beyond_noise"] is (lo > 0 or hi < 0)
            elif change["beyond_noise"]:  # the bootstrap's interval and McNemar's test both say so
                assert lo > 0 or hi < 0
            checked += 1
    assert checked == 2 * 2 * 5  # two families' acc, two consecutive pairs, five datasets
    table = trend_table(checkpoints, rows)
    assert table[0].split()[:6] == ["family", "dataset", "metric", "step", "2", "step"]
    page = trend_html(checkpoints)
    assert page.count("<img alt=") == len({(r["family"], r["metric"]) for r in rows}) and "step 6" in page


def test_trend_refuses_a_folder_without_reports(tmp_path):
    (tmp_path / "checkpoint-1").mkdir()
    with pytest.raises(FileNotFoundError, match="checkpoint-1: no summary.json"):
        read_checkpoints([tmp_path / "checkpoint-1"])


def test_a_bad_callback_argument_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="rows_per_set: 'x' is not an integer"):
        RobustnessCallback(data="laya_fixtures/rows", rows_per_set="x")
    with pytest.raises(UsageError, match="every: 'epoch' is not one of evaluate, save"):
        RobustnessCallback(data="laya_fixtures/rows", every="epoch")


def test_only_the_main_process_scores(tmp_path):
    """Under distributed training a rank other than the main one scores nothing and logs nothing."""
    from transformers import TrainerControl, TrainerState

    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=tmp_path, root=ROOT, **GATE)
    state = TrainerState(is_world_process_zero=False, global_step=3)
    callback.on_evaluate(None, state, TrainerControl(), model=object(), processing_class=None)
    assert callback.results == {} and state.log_history == [] and not list(tmp_path.iterdir())
