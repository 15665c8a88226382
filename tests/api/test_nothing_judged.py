"""A run that judged nothing never passes, and every failure of the Python API is typed: a dual encoder asked
question families (``run_gate`` and ``pytest robustness_tests``), another model's processor, a report folder another
run holds (``run_gate`` and ``GateResult.write``), a Ray option without the Ray executor; and the tally that decides
on checks asked for, judged, skipped and not applicable."""

import subprocess
import sys
from pathlib import Path

import pytest

import laya_robustness
from laya_robustness.report.wrapping import unwrap
from laya_robustness.run.errors import UsageError
from laya_robustness.run.judged import NO_CUDA, JudgedTally
from laya_robustness.run.outputs.lock import RunIdentity, claim, release
from laya_robustness.run.inputs.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "laya_fixtures" / "tiny-clip"
EMBEDDED = ROOT / "laya_fixtures" / "tiny-smolvlm"


def test_the_tally_passes_nothing_it_did_not_judge():
    assert JudgedTally().nothing_judged() is None  # no check asked for (``pytest tests``): nothing to say
    skipped = JudgedTally()
    for reason in ["a", "a", "b", "c", "d"]:
        skipped.asked_for(skipped=reason)
    nothing = skipped.nothing_judged()
    assert nothing.status == 4
    assert nothing.message == ("nothing was judged: all 5 checks asked for were skipped (2: a; 1: b; 1: c; and 1 "
                               "other reason)")
    inapplicable = JudgedTally()
    inapplicable.asked_for(not_applicable=True, skipped="max_ece needs probabilities")
    inapplicable.asked_for(skipped="not selected")
    assert inapplicable.nothing_judged().status == 3 and "1 of 2 checks were scored" in inapplicable.nothing_judged().message
    gpu = JudgedTally()
    gpu.asked_for(skipped=NO_CUDA)
    assert gpu.nothing_judged().message.startswith(f"{NO_CUDA}: 1 of the 1 checks asked for need one")
    gpu.merge({"asked": 1, "judged": 1, "not_applicable": 0, "skipped": {}})  # an xdist worker that judged one
    assert gpu.nothing_judged() is None and gpu.asked == 2


def test_run_gate_on_a_dual_encoder_with_question_families_does_not_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = laya_robustness.run_gate(str(CLIP), families=["option_order"], report_dir=tmp_path / "r")
    assert (result.passed, result.exit_status, result.judged, result.failures) == (False, 4, 0, [])
    assert result.nothing_judged.startswith("nothing was judged: all ")
    assert "tiny-clip is a dual encoder: it answers no questions, so option_order does not apply" in result.nothing_judged
    assert set(result.skipped.values()) and all(result.skipped.values())


def test_pytest_on_a_dual_encoder_with_question_families_exits_4_saying_nothing_was_judged(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-q", "-p", "no:randomly", "-p",
                           "no:cacheprovider", "--benchmark-skip", "--model", str(CLIP), "--families", "option_order",
                           "--report-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
    lines = unwrap(done.stdout.strip().splitlines())  # the terminal's lines, wrapped to its width, joined back
    assert lines[-2].startswith("NOTHING JUDGED (exit 4, the gate did not pass): nothing was judged: all ")
    assert "--model is a dual encoder" in lines[-2] and " passed" not in lines[-1]
    assert "no CUDA device" not in lines[-2]  # the cpu checks' reasons come first: the machine is not why


def test_another_models_processor_is_refused_before_anything_is_scored(tmp_path):
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(CLIP)
    with pytest.raises(UsageError, match=r"^processor: Idefics3Processor is not the processor of a model of type "
                                         r"'clip' \(AutoProcessor makes CLIPProcessor for it\)"):
        laya_robustness.run_gate(model, processor=AutoProcessor.from_pretrained(EMBEDDED), report_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_what_is_no_model_or_no_processor_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match=r"^model: object is neither a transformers model"):
        laya_robustness.run_gate(object(), processor=object())  # it used to raise AttributeError
    from transformers import AutoModelForImageTextToText

    with pytest.raises(UsageError, match=r"^processor: dict is no processor"):
        laya_robustness.run_gate(AutoModelForImageTextToText.from_pretrained(EMBEDDED), processor={})


def test_a_ray_option_without_the_ray_executor_is_refused_as_pytest_refuses_it():
    with pytest.raises(UsageError, match=r"^ray_address: only executor ray uses it \(the executor is local\)"):
        laya_robustness.run_gate(ray_address="127.0.0.1:6379")


def test_a_report_folder_another_run_holds_is_a_usage_error_for_run_gate_and_for_write(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    small = {"families": ["option_order"], "rows_per_set": 2, "invariance": False}
    result = laya_robustness.run_gate(**small)
    other = RunIdentity.this_process()  # another run's token, held by a live process
    claim(tmp_path / "held", other)
    try:
        with pytest.raises(UsageError, match=r"^report_dir: .*held is in use by another run"):
            result.write(tmp_path / "held")
        with pytest.raises(UsageError, match=r"^report_dir: .*held is in use by another run"):
            laya_robustness.run_gate(report_dir=tmp_path / "held", **small)
        assert [p.name for p in (tmp_path / "held").iterdir()] == [".laya-robustness.lock"]
    finally:
        release(tmp_path / "held", other)
    written = result.write(tmp_path / "held")  # once that run is gone, write() writes and lets the folder go
    assert {p.name for p in written} >= {"summary.json", "predictions.jsonl.gz"}
    assert not (tmp_path / "held" / ".laya-robustness.lock").exists()


def test_a_model_in_memory_that_cannot_be_scored_where_it_is_is_a_usage_error_naming_the_argument():
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(EMBEDDED)
    with torch.device("meta"):
        unloaded = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(EMBEDDED))
    for device in (None, "cpu"):  # the meta device's message used to suggest device='cpu', which then failed
        with pytest.raises(UsageError, match=r"^model: its weights are on the meta device"):
            laya_robustness.run_gate(unloaded, processor=processor, device=device)
    loaded = AutoModelForImageTextToText.from_pretrained(EMBEDDED)
    with pytest.raises(UsageError, match=r"^device: 'cuda:1' is not the model's own device 'cpu'.*model.to\('cuda:1'\)"):
        laya_robustness.run_gate(loaded, processor=processor, device="cuda:1")


@pytest.mark.parametrize("argv", [["no-such-command"], ["trend"], ["summarize"], ["floor", "--no-such-option"]])
def test_the_command_lines_bad_arguments_exit_4_not_argparses_2(argv):
    done = subprocess.run([sys.executable, "-m", "laya_robustness", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 4, done.stderr
    assert "python -m laya_robustness" in done.stderr and "error:" in done.stderr


def test_trend_names_a_summary_that_is_no_json(tmp_path):
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    (folder / "summary.json").write_text('{"families": ')
    done = subprocess.run([sys.executable, "-m", "laya_robustness", "trend", str(folder)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert done.stderr.startswith(f"error: {folder / 'summary.json'}: not a summary.json the gate wrote")


BAD = "not-a-value%%"


def _rejects(opt) -> bool:
    try:
        opt.parse(BAD)
    except Exception:  # noqa: BLE001  (the option's own parser says no)
        return True
    return False


@pytest.mark.parametrize("opt", [o for o in OPTIONS if not o.switch], ids=lambda o: o.flag)
def test_run_gate_validates_each_option_as_pytest_does(opt, monkeypatch):
    """Option by option, a value its parser refuses is a UsageError naming the argument for ``run_gate`` and a
    usage error (exit 4) naming the option for ``pytest robustness_tests``, with the same problem; a value it
    takes is refused by neither before any work."""
    from laya_robustness.run.inputs.options import parse_settings

    if not _rejects(opt):
        pytest.skip(f"{opt.flag} takes any text ({BAD!r} is a name, a path or a URL to it): checked where it is read")
    monkeypatch.chdir(ROOT)
    with pytest.raises(UsageError) as api:
        laya_robustness.run_gate(**{opt.field: BAD})
    first = str(api.value).splitlines()[0]
    assert first.startswith(f"{opt.field}: "), first
    with pytest.raises(UsageError) as parsed:
        parse_settings({opt.flag: BAD}, root=ROOT)
    assert first == str(parsed.value.for_arguments()).splitlines()[0]
    done = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "--collect-only", "-q", "-p",
                           "no:randomly", "-p", "no:cacheprovider", opt.flag, BAD], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    problem = first.split(": ", 1)[1]
    assert f"{opt.flag}: " in done.stderr and problem.split(" ")[0] in done.stderr, done.stderr[-2000:]


def test_a_harness_error_before_anything_is_scored_names_no_journal_and_leaves_no_scratch(tmp_path, monkeypatch):
    """It used to name a journal folder that was empty, and leave it in the temporary folder."""
    import shutil
    import tempfile

    from laya_robustness.run.errors import HarnessError

    broken = tmp_path / "broken"
    shutil.copytree(EMBEDDED, broken)
    (broken / "model.safetensors").write_bytes(b"these are no weights")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.chdir(ROOT)
    with pytest.raises(HarnessError, match="cannot load") as raised:
        laya_robustness.run_gate(str(broken), families=["option_order"], rows_per_set=2, invariance=False)
    assert "journal" not in str(raised.value) and list(scratch.iterdir()) == []
