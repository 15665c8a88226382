"""What a new user meets first: a run on their own rows does what concerns them (no embedded caption checks, no
benchmarks unless asked), says its plan and the time it has left, and a wrong input ends at once with one clear
error (bad rows under xdist, a model path that is not there, a model that does not load) without syrupy's advice
to delete the committed snapshot."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from laya_robustness.pytest_plugin.estimate import Planned, TimeLeft, planned_tests, short_duration

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "laya_fixtures" / "rows"
SYRUPY_ADVICE = "--snapshot-update to delete unused snapshots"


def _own_rows(folder: Path, n: int = 6) -> Path:
    """``n`` rows of one fixture set copied as a dataset of one's own (``mine``), with their images."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, line in enumerate((ROWS / "colour_choice.jsonl").read_text().splitlines()[:n]):
        row = json.loads(line)
        images = []
        for image in row["images"]:
            shutil.copy(ROWS / image, folder / Path(image).name)
            images.append(Path(image).name)
        out.append(json.dumps({**row, "dataset": "mine", "row_id": f"mine/{i}", "group_id": f"mine/{i}",
                               "cluster": f"mine/{i}", "images": images}))
    (folder / "rows.jsonl").write_text("\n".join(out) + "\n")
    return folder / "rows.jsonl"


def _gate(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    """A gate run in its own pytest, as a user starts it (not as an xdist worker of this one: pytest-benchmark
    would take xdist's variables for its own run's and disable the benchmarks)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:randomly", "-p",
                           "no:cacheprovider", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_run_on_ones_own_rows_runs_what_concerns_them_and_says_its_plan_and_time_left(tmp_path):
    rows = _own_rows(tmp_path / "own")
    done = _gate("--data", str(rows), "--families", "option_order,shift,lgip_combined", "-rs",
                 "--report-dir", str(tmp_path / "r"))
    out = done.stdout
    assert done.returncode in (0, 1), out[-3000:] + done.stderr[-2000:]
    words = " ".join(out.split())
    assert "laya-robustness plan (cpu): 6 rows of 1 dataset; 3 family tests of 3 families," in words, out[:3000]
    assert " left" in out and "[100%]" in out  # the time left beside pytest's percentage, gone at the end
    assert max(len(line) for line in out.splitlines() if line.endswith(" left")) <= 80
    assert "benchmarks run on your own --data when asked: --benchmark-only" in out
    assert "the embedded dual encoder (the lgip families, test_dual_invariance) is probed with the embedded rows " \
           "only: on your own --data ask for it with --dual-model laya_fixtures/tiny-clip" in out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert list(summary["meta"]["datasets"]) == ["mine"]  # no caption rows: no shape_captions
    assert "shape_captions" not in (tmp_path / "r" / "summary.json").read_text()


def test_asked_for_the_benchmarks_run_on_ones_own_rows(tmp_path):
    rows = _own_rows(tmp_path / "own", n=4)
    done = _gate("--data", str(rows), "--families", "option_order", "--benchmark-only",
                 "-k", "scorer_throughput and batch and not unshared", "--report-dir", str(tmp_path / "r"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout.splitlines()[-1]


def test_bad_rows_under_xdist_end_with_exit_4_and_the_problem_not_a_crash(tmp_path):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"row_id": "a", "question": "q?", "options": ["x", "y"], "answer": 0}\n')
    done = _gate("-n", "2", "--data", str(bad))
    assert done.returncode == 4, done.stdout[-3000:]
    assert "INTERNALERROR" not in done.stdout + done.stderr
    out = " ".join(done.stdout.split())  # the words as written, whatever the terminal's wrapping
    assert f"ERROR (exit 4, nothing was run): --data: 2 problems in {bad}: {bad}:1: field 'answer': unknown " \
           f"field fix: did you mean 'label'" in out
    assert f" {bad}:1: field 'dataset': missing fix: 'dataset' is required" in out


def test_a_model_path_that_is_not_there_is_a_usage_error_naming_it(tmp_path):
    done = _gate("--model", str(tmp_path / "nowhere"))
    assert done.returncode == 4, done.stdout[-3000:]
    assert f"--model: no directory {tmp_path / 'nowhere'}; a local checkpoint is a directory that exists" \
        in done.stderr + done.stdout


def test_a_model_that_cannot_load_stops_the_run_once_without_syrupys_deletion_advice(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    done = _gate("-q", "--model", str(model), "--report-dir", str(tmp_path / "r"))
    out = done.stdout
    assert done.returncode == 3, out[-3000:]
    assert out.count("FAILED ") == 1  # the first test that needed the model; the run stopped there
    assert f"cannot load scorer 'hf' for model '{model}' on cpu" in out
    assert SYRUPY_ADVICE not in out and "snapshot unused" not in out
    assert "the summary snapshot was not compared (the run stopped before its test)" in out
    assert (ROOT / "robustness_tests" / "__snapshots__").is_dir()


def test_time_left_learns_from_the_run_and_forgets_what_was_skipped():
    tests = [Planned("g/f.py::test_shift[a-cpu]", "g/f.py", "shift", 10),
             Planned("g/f.py::test_shift[b-cpu]", "g/f.py", "shift", 30),
             Planned("g/f.py::test_text[a-cpu]", "g/f.py", "text", 10),
             Planned("g/i.py::test_invariance[cpu-x]", "g/i.py", None, 0),
             Planned("g/i.py::test_invariance[cpu-y]", "g/i.py", None, 0)]
    left = TimeLeft(tests, workers=2)
    assert left.seconds_left() is None

    class Report:
        def __init__(self, nodeid, when, duration, skipped=False):
            self.nodeid, self.when, self.duration, self.skipped = nodeid, when, duration, skipped

    for when, seconds in (("setup", 1.0), ("call", 3.0), ("teardown", 1.0)):
        left.follow(Report("g/f.py::test_shift[a-cpu]", when, seconds))
    assert left.done == {"g/f.py::test_shift[a-cpu]": 5.0}
    # shift at 0.5 s a row: 15 s; text at the run's rate: 5 s; the invariance tests at the mean of the done: 2 x 5 s
    assert left.seconds_left() == pytest.approx((15 + 5 + 10) / 2)
    left.follow(Report("g/i.py::test_invariance[cpu-y]", "setup", 0.0, skipped=True))
    assert "g/i.py::test_invariance[cpu-y]" not in left.tests
    assert left.seconds_left() == pytest.approx((15 + 5 + 5) / 2)


def test_planned_tests_know_families_datasets_and_what_skips_here():
    ids = ["robustness_tests/test_families.py::test_shift[colour-cpu]",
           "robustness_tests/test_families.py::test_shift[colour-gpu]",
           "robustness_tests/test_invariance.py::test_invariance[cpu-hostile]",
           "tests/loaders/test_rows.py::test_something"]
    planned = planned_tests(ids, lambda name: "shift" if name == "test_shift" else None,
                            lambda family, dataset: {"colour": 12}[dataset], ["colour"],
                            lambda nodeid: not nodeid.endswith("-gpu]"))
    assert planned == [Planned(ids[0], "robustness_tests/test_families.py", "shift", 12),
                       Planned(ids[2], "robustness_tests/test_invariance.py", None, 0),
                       Planned(ids[3], "tests/loaders/test_rows.py", None, 0)]
    assert [short_duration(s) for s in (0.4, 59.6, 61, 3599, 3600)] == ["~0 s", "~1:00", "~1:01", "~59:59", "~1 h 00"]
