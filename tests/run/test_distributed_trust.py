"""The ranks of ``--executor distributed`` are not trusted to agree: a real world of 2 CPU processes (gloo;
``tests/helpers/torchrun_run_gate.py``) whose rank 1 is given other weights or other rows ends on every rank with
``RanksDisagree`` naming it, nothing merged; ranks that journaled in folders of their own resume to a local run's
records; a rank killed outside torchrun, or one that hangs, ends the other within a bounded time with a
``WorldBroken`` naming the gather."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.distributed import agreement, disagreement, stall_seconds

from helpers.paths import ROOT, TESTS
from helpers.records import prediction_lines
from helpers.torchrun_parts import torchrun

PROGRAM = TESTS / "helpers" / "torchrun_run_gate.py"
#: Seconds a world may take before the test says it hung (each case takes 10 to 30 s here).
WORLD_TIMEOUT = 300


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    return env


def _accounts(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text())["runs"] for r in range(2)]


def _torchrun(case: str, out: Path) -> list[dict]:
    torchrun(PROGRAM, case, out, WORLD_TIMEOUT, OMP_NUM_THREADS="1")
    return _accounts(out)


@pytest.mark.parametrize("case, differs", [
    ("weights", r"rank 1 scores model '[^']*tiny-smolvlm-seed2' with weights tensors 443b9f141a08, rank 0 model "
                r"'[^']*tiny-smolvlm' with weights tensors 0eaaf349490c"),
    ("rows", r"rank 1 was given other rows or cells than rank 0"),
])
def test_ranks_given_other_weights_or_rows_end_the_run_on_every_rank_naming_them(tmp_path, case, differs):
    ranks = _torchrun(case, tmp_path)
    for runs in ranks:
        assert runs[0]["error"] == "HarnessError", runs
        assert "RanksDisagree: the ranks would score different things" in runs[0]["message"]
        assert len(__import__("re").findall(differs, runs[0]["message"])) == 1, runs[0]["message"]
    assert not (tmp_path / "reports" / "summary.json").exists()  # nothing merged, nothing claimed


def test_ranks_that_journaled_apart_resume_to_the_local_runs_records(tmp_path):
    """Rank 1 breaks at its second chunk; each rank's journal is in a folder of its own (no shared disk), so each
    knows other rows: the resumed run shares what they found and scores the rest, to the local run's records."""
    first, resumed = zip(*_torchrun("resume", tmp_path))
    assert all("injected on rank 1" in run["message"] for run in first)
    assert all(run["exit_status"] in (0, 1) and run["complete"] for run in resumed), resumed
    journaled = [sum(1 for p in (tmp_path / f"journal-r{r}").glob("*.jsonl") for _ in p.open()) for r in range(2)]
    assert journaled[0] > 0 and journaled[1] > 0
    assert prediction_lines(tmp_path / "reports") == prediction_lines(tmp_path / "local")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _by_hand(case: str, out: Path, **extra: str) -> tuple[list[dict], float]:
    """The two ranks started as two processes (no torchrun agent to end rank 0 when rank 1 dies): rank 0's account
    and the seconds it took; rank 1 is killed if it is still there."""
    base = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2", **extra)
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(PROGRAM), case, str(out)], cwd=ROOT,
                              env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for r in range(2)]
    try:
        procs[0].wait(timeout=WORLD_TIMEOUT)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return json.loads((out / "rank0.json").read_text())["runs"], time.monotonic() - start


def test_a_rank_killed_outside_torchrun_ends_the_other_with_the_gather_named(tmp_path):
    runs, _ = _by_hand("killed", tmp_path)
    assert runs[0]["error"] == "HarnessError", runs
    assert "WorldBroken: rank 0 lost a rank at the gate's" in runs[0]["message"]
    assert "a rank died, was killed or lost its connection" in runs[0]["message"]


def test_a_rank_that_hangs_ends_the_other_within_the_stall_bound(tmp_path):
    runs, seconds = _by_hand("stalled", tmp_path, LAYA_RANK_STALL_S="20")
    assert runs[0]["error"] == "HarnessError", runs
    assert "WorldBroken: rank 0 waited more than 20 s at the gate's" in runs[0]["message"]
    assert "LAYA_RANK_STALL_S" in runs[0]["message"]
    assert runs[0]["seconds"] < 20 + 60 and seconds < WORLD_TIMEOUT


def test_the_stall_bound_is_read_from_the_environment_and_checked(monkeypatch):
    monkeypatch.delenv("LAYA_RANK_STALL_S", raising=False)
    assert stall_seconds() == 600
    monkeypatch.setenv("LAYA_RANK_STALL_S", "2.5")
    assert stall_seconds() == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("LAYA_RANK_STALL_S", bad)
        with pytest.raises(UsageError, match="^LAYA_RANK_STALL_S: .* is not a positive number of seconds"):
            stall_seconds()


def test_disagreement_names_weights_before_settings_before_rows(tmp_path):
    """``agreement`` of one rank against others: the same weights, configuration and rows agree; other weights are
    named before other settings, and those before other rows; a journal's records of these rows are shared."""
    from laya_robustness.recipes.fixture_rows import generate_rows
    from laya_robustness.run.pipeline.journal import Journal, row_key

    rows, keys = generate_rows("colour_choice", 4, seed=0), [("text", "colour_choice", "cpu")]
    identity = {"model": "a", "weights_sha256": {"tensors": "0eaaf349490c1fb5"}}
    journal = Journal(tmp_path / "j.jsonl", "config-a", {})
    mine = agreement(identity, [(journal, rows)], keys)
    assert disagreement([mine, agreement(identity, [(journal, rows)], keys)]) is None
    other_weights = agreement({**identity, "weights_sha256": {"tensors": "443b9f141a08ff"}}, [(journal, rows[:3])],
                              keys)
    other_config = agreement(identity, [(Journal(tmp_path / "j.jsonl", "config-b", {}), rows[:3])], keys)
    shifted = [row.replaced(label=(row.label + 1) % len(row.options)) for row in rows]
    why = disagreement([mine, other_weights, other_config, agreement(identity, [(journal, shifted)], keys)])
    assert why.count("; rank ") == 2
    assert "rank 1 scores model 'a' with weights tensors 443b9f141a08, rank 0 model 'a' with weights tensors " \
           "0eaaf349490c" in why
    assert "rank 2 scores with other settings than rank 0" in why
    assert "rank 3 was given other rows or cells than rank 0" in why
    assert disagreement([mine, agreement(identity, [(journal, rows)], [("image", "colour_choice", "cpu")])])
    known = Journal(tmp_path / "j.jsonl", "config-a", {row_key("config-a", rows[1]): {"row_id": rows[1].row_id}})
    assert agreement(identity, [(known, rows)], keys)["found"] == known.known
