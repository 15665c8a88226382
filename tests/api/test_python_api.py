"""``laya_robustness.run_gate``: the pytest gate's numbers and verdict without pytest, on the embedded default and on
another architecture, from a directory and from a model in memory; its arguments validated as the options are."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import laya_robustness
from laya_robustness.recipes.tiny_checkpoints import build_checkpoint

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED = ROOT / "laya_fixtures" / "tiny-smolvlm"
#: A small run: two families, few rows, two invariance rows per set.
SMALL = {"families": ["option_order", "text"], "rows_per_set": 3, "invariance_rows": 2}
SMALL_OPTIONS = ("--families", "option_order,text", "--rows-per-set", "3", "--invariance-rows", "2")


def pytest_gate(report_dir: Path, *options: str) -> int:
    """``pytest robustness_tests`` from the project root with ``options`` (no benchmark, no snapshot): its exit."""
    done = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-q", "-p", "no:randomly", "-p",
                           "no:cacheprovider", "-k", "not (benchmark or snapshot)", "--report-dir", str(report_dir),
                           *options], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode


def api_run(out: Path, **arguments) -> dict:
    """``run_gate(**arguments)`` in a fresh interpreter from the project root, as the pytest gate runs (the same
    threads: the invariance conditions' last digits depend on them), its reports written to ``out``; what its
    result holds."""
    code = ("import json, sys, laya_robustness; r = laya_robustness.run_gate(**json.loads(sys.argv[1])); "
            "print(json.dumps({'passed': r.passed, 'exit_status': r.exit_status, 'summary': r.summary, "
            "'checks': r.checks, 'invariance': r.invariance, 'complete': r.scope.complete}))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps({**arguments, "report_dir": str(out)})], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def without_meta(document: dict) -> dict:
    return {k: v for k, v in document.items() if k != "meta"}


def records(folder: Path) -> bytes:
    return gzip.decompress((folder / "predictions.jsonl.gz").read_bytes())


def same_as_the_pytest_gate(result: dict, folder: Path, status: int) -> None:
    assert without_meta(result["summary"]) == without_meta(json.loads((folder / "summary.json").read_text()))
    assert result["checks"] == json.loads((folder / "checks.json").read_text())
    invariance = json.loads((folder / "invariance.json").read_text())
    assert result["invariance"]["conditions"] == invariance["conditions"]
    assert result["exit_status"] == status and result["passed"] is (status == 0)


@pytest.fixture(scope="module")
def embedded_pytest(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pytest-gate")
    return folder, pytest_gate(folder, *SMALL_OPTIONS)


def test_run_gate_gives_the_pytest_gates_numbers_and_verdict_on_the_embedded_default(embedded_pytest, tmp_path):
    folder, status = embedded_pytest
    result = api_run(tmp_path / "api", **SMALL)
    same_as_the_pytest_gate(result, folder, status)
    assert result["complete"] and result["summary"]["meta"]["complete"] is True
    assert sorted(p.name for p in (tmp_path / "api").iterdir()) == [
        "checks.json", "invariance.json", "predictions.jsonl.gz", "report.html", "summary.json", "summary.md"]
    assert records(tmp_path / "api") == records(folder)


def test_no_report_is_written_unless_asked_and_write_writes_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = laya_robustness.run_gate(root=ROOT, families=["text"], rows_per_set=2, invariance=False)
    assert list(tmp_path.iterdir()) == []  # nothing written, no journal left behind
    written = result.write(tmp_path / "later")
    assert sorted(p.name for p in written) == ["checks.json", "predictions.jsonl.gz", "report.html", "summary.json",
                                               "summary.md"]
    assert json.loads((tmp_path / "later" / "summary.json").read_text()) == result.summary


def test_run_gate_gives_the_pytest_gates_numbers_on_another_architecture(tmp_path):
    model = build_checkpoint("llava", tmp_path / "llava")
    status = pytest_gate(tmp_path / "pytest", "--model", str(model), "--families", "option_order",
                         "--rows-per-set", "2", "--invariance-rows", "1")
    result = api_run(tmp_path / "api", model=str(model), families=["option_order"], rows_per_set=2, invariance_rows=1)
    same_as_the_pytest_gate(result, tmp_path / "pytest", status)
    assert records(tmp_path / "api") == records(tmp_path / "pytest")
    assert result["summary"]["meta"]["model"]["architecture"] == "llava"


def test_a_crossed_limit_is_a_failure_with_its_numbers_and_exit_status_1(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    strict = tmp_path / "strict.toml"
    strict.write_text((ROOT / "thresholds.toml").read_text().replace(
        "[families.option_order]\n", "[families.option_order]\nmin_acc = 0.99\n", 1))
    result = laya_robustness.run_gate(families=["option_order"], rows_per_set=3, thresholds=strict, invariance=False,
                                      limitations="none")
    assert not result.passed and result.exit_status == 1
    crossed = [f for f in result.failures if f.check == "min_acc"]
    assert crossed and all(f.family == "option_order" and f.limit == 0.99 and f.value < 0.99 for f in crossed)
    assert all(f"option_order/{f.dataset}: min_acc FAILED" in f.message for f in crossed)
    assert result.invariance is None and "invariance[cpu-repeat]" not in result.skipped


@pytest.mark.parametrize("arguments, words", [
    ({"seed": "abc"}, "seed: 'abc' is not an integer\n  pass instead, e.g.: run_gate(seed=0)"),
    ({"families": ["optoin_order"]}, "families: unknown family 'optoin_order'; did you mean option_order"),
    ({"batch_size": 0}, "batch_size: 0 is below 1"),
    ({"scorer": "openai"}, "endpoint: scorer openai needs the server's base URL"),
    ({"data": "no/such/rows"}, "data: "),
    ({"executor": "ray", "ray_actors": 0}, "ray_actors: 0 is below 1"),
])
def test_a_bad_argument_raises_a_usage_error_naming_it(arguments, words, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(laya_robustness.UsageError) as raised:
        laya_robustness.run_gate(**arguments)
    assert words in str(raised.value) and "--" not in str(raised.value).split("\n")[0]


def test_an_unknown_argument_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unexpected argument 'row_per_set'; did you mean rows_per_set"):
        laya_robustness.run_gate(row_per_set=2)


def test_run_gate_runs_without_pytest_and_the_package_imports_light():
    """Importing the package imports neither torch nor the run; a whole run_gate call never imports pytest."""
    code = ("import sys, laya_robustness; assert 'torch' not in sys.modules and 'laya_robustness.run' not in "
            "sys.modules; r = laya_robustness.run_gate(families=['text'], rows_per_set=2, invariance=False); "
            "assert 'pytest' not in sys.modules, 'pytest imported'; print(r.exit_status)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() in ("0", "1")


def test_a_model_in_memory_gives_the_records_of_its_saved_directory(tmp_path, monkeypatch):
    """Scored as it stands (train mode before, train mode after), with the identity its directory has."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    monkeypatch.chdir(ROOT)
    model = AutoModelForImageTextToText.from_pretrained(EMBEDDED, attn_implementation="eager").train()
    processor = AutoProcessor.from_pretrained(EMBEDDED)
    arguments = {"families": ["option_order", "text"], "rows_per_set": 2, "invariance": False, "limitations": "none"}
    in_memory = laya_robustness.run_gate(model, processor=processor, report_dir=tmp_path / "memory", **arguments)
    saved = laya_robustness.run_gate(str(EMBEDDED), report_dir=tmp_path / "saved", **arguments)
    assert model.training is True
    assert records(tmp_path / "memory") == records(tmp_path / "saved")
    assert without_meta(in_memory.summary) == without_meta(saved.summary)
    assert in_memory.summary["meta"]["model"]["weights_sha256"] == saved.summary["meta"]["model"]["weights_sha256"]
    with pytest.raises(laya_robustness.UsageError, match="processor: a model loaded in memory needs its processor"):
        laya_robustness.run_gate(model)
