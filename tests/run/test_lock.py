"""One run per report folder: the lock (claim, share, refuse, wait, take over a gone run's), and two real gate runs
started on one --report-dir."""

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from laya_robustness.run.outputs.lock import LEASE_S, LOCK_NAME, ReportDirInUse, RunIdentity, claim, release, renew

from helpers.gate_project import gate_command

pytest_plugins = ["pytester"]


def test_a_run_takes_the_lock_its_processes_share_it_and_another_run_is_refused(tmp_path):
    run, other = RunIdentity.this_process(), RunIdentity.this_process()
    assert claim(tmp_path, run).how == "taken"
    assert claim(tmp_path, run).how == "joined"  # an xdist worker of the same run
    with pytest.raises(ReportDirInUse) as refused:
        claim(tmp_path, other)
    message = str(refused.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()}, started {run.started}" in message
    assert str(tmp_path / LOCK_NAME) in message and "--report-dir" in message
    assert not release(tmp_path, other) and (tmp_path / LOCK_NAME).exists()  # not its lock
    assert release(tmp_path, run) and not (tmp_path / LOCK_NAME).exists()
    assert claim(tmp_path, other).how == "taken"


def test_a_lock_whose_process_is_gone_is_taken_over(tmp_path):
    """A real process takes the lock and is killed with SIGKILL: the next run takes it over, naming it."""
    code = ("import sys, time; from laya_robustness.run.outputs.lock import RunIdentity, claim; "
            "claim(sys.argv[1], RunIdentity.this_process()); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(ReportDirInUse, match=f"pid {holder.pid} on host"):
        claim(tmp_path, RunIdentity.this_process())
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    held = claim(tmp_path, RunIdentity.this_process())
    assert held.how == "took over" and held.previous.pid == holder.pid


def test_a_reused_pid_does_not_keep_a_gone_runs_lock(tmp_path):
    """The lock names its process's start time: a live process that reuses the pid is another process."""
    gone = RunIdentity("gone", os.getpid(), socket.gethostname(), "2026-01-01T00:00:00Z", pid_start="1")
    (tmp_path / LOCK_NAME).write_text(json.dumps(gone.as_dict()))
    assert claim(tmp_path, RunIdentity.this_process()).how == "took over"


def test_a_lock_of_another_host_is_stale_only_once_its_lease_is_over(tmp_path):
    far = RunIdentity("far", 1, "another-host", "2026-01-01T00:00:00Z")
    lock = tmp_path / LOCK_NAME
    lock.write_text(json.dumps(far.as_dict()))
    with pytest.raises(ReportDirInUse, match="pid 1 on host another-host"):
        claim(tmp_path, RunIdentity.this_process())
    assert renew(tmp_path, far)  # its run renews the lease
    old = time.time() - LEASE_S - 5
    os.utime(lock, (old, old))
    assert claim(tmp_path, RunIdentity.this_process()).how == "took over"


def test_a_second_run_waits_for_the_first_when_asked_to(tmp_path):
    first, second = RunIdentity.this_process(), RunIdentity.this_process()
    claim(tmp_path, first)
    threading.Timer(1.0, release, (tmp_path, first)).start()
    taken = claim(tmp_path, second, wait_s=30, poll_s=0.1)
    assert taken.how == "taken" and taken.waited_for.token == first.token  # waited for the first run, then took it


def _claim_once(folder, barrier, claimed, results):
    barrier.wait()
    try:
        results.put(claim(folder, RunIdentity.this_process()).how)
    except ReportDirInUse:
        results.put("refused")
    claimed.wait()  # the holder stays alive until every claimant has claimed: a gone holder's lock is stale


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_of_runs_claiming_at_once_exactly_one_holds_the_lock(tmp_path, stale):
    if stale:  # every claimant sees the same gone run's lock and tries to take it over
        gone = RunIdentity("gone", 2 ** 22 + 1, socket.gethostname(), "2026-01-01T00:00:00Z")
        (tmp_path / LOCK_NAME).write_text(json.dumps(gone.as_dict()))
    context = multiprocessing.get_context("fork")  # no re-import of this module
    barrier, claimed, results = context.Barrier(4), context.Barrier(4), context.Queue()
    workers = [context.Process(target=_claim_once, args=(tmp_path, barrier, claimed, results)) for _ in range(4)]
    for w in workers:
        w.start()
    outcomes = sorted(results.get(timeout=120) for _ in workers)
    for w in workers:
        w.join()
    assert outcomes == ["refused"] * 3 + ["took over" if stale else "taken"]


def _wait_for_text(path, text, timeout=300):
    deadline = time.time() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.time() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.1)


def test_a_second_run_on_a_report_dir_in_use_stops_with_exit_4_naming_the_first(gate):
    """Gate runs on one --report-dir: while the first is scoring, a second stops before scoring anything (exit 4,
    the first run named), in one process or under xdist; one told to wait starts once the first has written its
    complete report."""
    hold = gate.path / "hold"
    hold.touch()
    env = {**os.environ, "LAYA_COUNT_FILE": str(gate.path / "first.count"), "LAYA_HOLD_FILE": str(hold)}
    first = subprocess.Popen(gate_command(gate), cwd=gate.path, env=env,
                             stdout=(gate.path / "first.out").open("w"), stderr=subprocess.STDOUT)
    _wait_for_text(gate.path / "first.count", "\n")  # scoring, and held there
    lock = gate.path / "reports" / LOCK_NAME
    holder = json.loads(lock.read_text())
    assert holder["pid"] == first.pid
    env = {**os.environ, "LAYA_COUNT_FILE": str(gate.path / "second.count")}
    for xdist in ((), ("-n", "2")):
        second = subprocess.run(gate_command(gate, *xdist), cwd=gate.path, env=env, capture_output=True, text=True)
        out = second.stdout + second.stderr
        assert second.returncode == 4, out[-3000:]
        words = " ".join(out.split())  # the message's words, whatever the terminal's wrapping
        assert f"is in use by another run (pid {first.pid} on host {holder['host']}, started {holder['started']}" \
            in words
        assert not (gate.path / "second.count").exists()  # nothing was scored
    waiting = subprocess.Popen(gate_command(gate, "--report-dir-wait", "600", "--seed", "1"), cwd=gate.path,
                               env=env, stdout=(gate.path / "waiting.out").open("w"), stderr=subprocess.STDOUT)
    _wait_for_text(gate.path / "waiting.out", "waiting up to 600 s")
    hold.unlink()
    assert first.wait(timeout=600) == 0, (gate.path / "first.out").read_text()[-3000:]
    assert "laya-robustness covered (cpu): complete" in (gate.path / "first.out").read_text()
    assert waiting.wait(timeout=600) == 0, (gate.path / "waiting.out").read_text()[-3000:]
    assert f"waited for the run that held {gate.path / 'reports'} to end (pid {first.pid} on host" in \
        " ".join((gate.path / "waiting.out").read_text().split())  # the note's words, whatever the wrapping
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    assert summary["meta"]["seed"] == 1 and summary["meta"]["complete"] is True  # the waiting run's, whole
    assert not lock.exists()
