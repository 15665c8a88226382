"""Reports that survive interruptions, crashes and kill -9: atomic, marked incomplete, resumable."""

import gzip
import json
import os
import signal
import subprocess
import time

import pytest

from laya_robustness.report.wrapping import unwrap

from helpers.gate_project import FAMILIES, gate_command, run, scored_rows

pytest_plugins = ["pytester"]


def _summary(path):
    return json.loads(path.read_text())


def test_an_interrupted_run_keeps_the_last_complete_report(gate):
    assert run(gate, *FAMILIES).ret == 0
    reports = gate.path / "reports"
    good = (reports / "summary.json").read_bytes()
    assert _summary(reports / "summary.json")["meta"]["complete"] is True
    result = run(gate, *FAMILIES, "--scorer", "helpers.fakes:interrupting", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (reports / "summary.json").read_bytes() == good
    partial = _summary(reports / "summary.incomplete.json")
    assert partial["meta"]["complete"] is False and "INTERRUPTED" in partial["meta"]["incomplete_reason"]
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines(["*INCOMPLETE RUN*previous run was kept*--resume*"])


def test_a_crash_while_scoring_keeps_the_last_complete_report(gate):
    assert run(gate, *FAMILIES).ret == 0
    reports = gate.path / "reports"
    good = (reports / "predictions.jsonl.gz").read_bytes()
    result = run(gate, *FAMILIES, "--scorer", "helpers.fakes:crashing")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    assert (reports / "predictions.jsonl.gz").read_bytes() == good
    assert _summary(reports / "summary.json")["meta"]["complete"] is True


def test_a_complete_run_clears_what_it_does_not_rewrite(gate):
    reports = gate.path / "reports"
    reports.mkdir()
    (reports / "invariance.json").write_text("{}")  # left by an older run
    (reports / "summary.incomplete.json").write_text("{}")
    assert run(gate, *FAMILIES).ret == 0
    assert not (reports / "invariance.json").exists() and not (reports / "summary.incomplete.json").exists()
    assert not (reports / "journal").exists()  # a complete run needs no journal
    assert not [p for p in reports.iterdir() if p.name.startswith(".")]  # no temporary files left


def _clean_run(gate) -> dict:
    """An uninterrupted gate run reporting to ``clean`` (its scored rows counted in ``clean.count``); the
    environment it ran with."""
    env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"], "LAYA_COUNT_FILE": str(gate.path / "clean.count")}
    clean = subprocess.run(gate_command(gate, "--report-dir", "clean", "--batch-size", "2"), cwd=gate.path, env=env,
                           capture_output=True)
    assert clean.returncode == 0, clean.stdout.decode()[-3000:]
    return env


def _slow_run_until_journaled(gate, env: dict, report_dir: str, lines: int, stdout) -> subprocess.Popen:
    """A slowed gate run reporting to ``report_dir`` (its rows counted in ``<report_dir>.slow.count``), once its journal
    holds ``lines`` lines."""
    env.update(LAYA_COUNT_FILE=str(gate.path / f"{report_dir}.slow.count"), LAYA_SLOW="0.05")
    process = subprocess.Popen(gate_command(gate, "--report-dir", report_dir, "--batch-size", "2"), cwd=gate.path,
                               env=env, stdout=stdout, stderr=subprocess.STDOUT)
    journal = gate.path / report_dir / "journal"
    deadline = time.time() + 300
    while time.time() < deadline and sum(1 for f in journal.glob("*.jsonl") for _ in f.open()) < lines:
        time.sleep(0.2)
    return process


def test_kill_9_then_resume_gives_the_same_reports_as_a_clean_run(gate):
    """A run killed while scoring leaves its journal and its lock: the next run takes the lock over and, with
    --resume, scores only what was not journaled; its reports are byte-identical to an uninterrupted run's."""
    env = _clean_run(gate)
    total = scored_rows(gate.path / "clean.count")
    killed = _slow_run_until_journaled(gate, env, "resumed", 80, subprocess.DEVNULL)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not (gate.path / "resumed" / "summary.json").exists()
    lock = gate.path / "resumed" / ".laya-robustness.lock"
    assert json.loads(lock.read_text())["pid"] == killed.pid  # left behind by the killed run

    env.update(LAYA_COUNT_FILE=str(gate.path / "resumed.count"))
    env.pop("LAYA_SLOW")
    resumed = subprocess.run(gate_command(gate, "--report-dir", "resumed", "--batch-size", "2", "--resume"),
                             cwd=gate.path, env=env, capture_output=True)
    assert resumed.returncode == 0, resumed.stdout.decode()[-3000:]
    assert f"took over the lock of {gate.path / 'resumed'} from a run that is gone (pid {killed.pid} on host" in \
        " ".join(resumed.stdout.decode().split())  # the note's words, whatever the terminal's wrapping
    assert not lock.exists()
    rescored = scored_rows(gate.path / "resumed.count")
    assert 0 < rescored <= total - 64  # the journaled chunks were reused, not scored again
    for name in ("predictions.jsonl.gz", "summary.json"):
        assert (gate.path / "clean" / name).read_bytes() == (gate.path / "resumed" / name).read_bytes(), name


def test_sigterm_stops_the_run_as_ctrl_c_does_and_resume_finishes_it(gate):
    """SIGTERM mid-run (a CI system cancelling the job): an incomplete report, the lock released, the journal kept,
    a line saying so; --resume then finishes with the uninterrupted run's bytes."""
    env = _clean_run(gate)
    stopped = _slow_run_until_journaled(gate, env, "stopped", 40, subprocess.PIPE)
    started = time.time()
    stopped.send_signal(signal.SIGTERM)
    out = stopped.communicate(timeout=120)[0].decode()
    assert time.time() - started < 30
    assert stopped.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "INCOMPLETE RUN: the run ended with exit status 2 (INTERRUPTED)" in out
    assert not (gate.path / "stopped" / ".laya-robustness.lock").exists()
    meta = json.loads((gate.path / "stopped" / "summary.json").read_text())["meta"]
    assert meta["complete"] is False and list((gate.path / "stopped" / "journal").glob("*.jsonl"))

    env.pop("LAYA_SLOW")
    env.update(LAYA_COUNT_FILE=str(gate.path / "resumed.count"))
    resumed = subprocess.run(gate_command(gate, "--report-dir", "stopped", "--batch-size", "2", "--resume"),
                             cwd=gate.path, env=env, capture_output=True)
    assert resumed.returncode == 0, resumed.stdout.decode()[-3000:]
    for name in ("predictions.jsonl.gz", "summary.json"):
        assert (gate.path / "clean" / name).read_bytes() == (gate.path / "stopped" / name).read_bytes(), name


@pytest.mark.parametrize("content, words", [
    (b"\x1f\x8b\x08\x00\x00\x00", "not a readable gzip UTF-8 file"),
    (None, "field 'argmax'"),
])
def test_summarize_on_a_bad_file_prints_one_line_and_exits_4(tmp_path, capsys, content, words):
    from laya_robustness.__main__ import USAGE_ERROR, main
    from laya_robustness.predictions import write_predictions

    path = tmp_path / "predictions.jsonl.gz"
    if content is None:
        record = {"row_id": "d/1", "group_id": "d/1", "cluster": "c", "dataset": "d", "family": "orig",
                  "variant": "orig", "primitive": "noul", "label": 1, "logits": [0.0, 1.0], "probs": [0.3, 0.7],
                  "argmax": 1}
        write_predictions(path, [record])
        lines = gzip.decompress(path.read_bytes()).decode().replace('"argmax":1', '"argmax":9')
        path.write_bytes(gzip.compress(lines.encode()))
    else:
        path.write_bytes(content)
    assert main(["summarize", str(path), "--out", str(tmp_path / "s.json")]) == USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0] and str(path) in err[0]
