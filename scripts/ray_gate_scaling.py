"""Whole gate runs on --executor ray over pixel families of photos: the front end's CPU seconds per 1,000 scored
rows, wall time against the number of actors, and peak memory against the number of rows.

The model is a device-bound model in miniature that reads every pixel (``tests/helpers/fakes.py``'s ``PixelScorer``: a
fixed sleep per row, as one GPU per actor would take, plus a hash of each image's pixels), so the wall times
measure the pool and the front end, not this machine's CPUs scoring. The script writes ``--rows`` photo rows of
``--size`` (``fixtures.bench.write_photo_rows``), starts its own one-node cluster (``ray start --head`` on
127.0.0.1 with as many logical CPUs as the largest pool), runs ``pytest robustness_tests`` once per pool size and
once with the local executor (``-n 0``), checks that every run's predictions are the local run's byte for byte,
and prints one JSON object::

    python scripts/ray_gate_scaling.py --actors 1,2,4 --rows 60 --per-row 0.02
    python scripts/ray_gate_scaling.py --actors 4 --rows 60,240 --per-row 0 --repeat 5   # memory against rows

``--code DIR`` runs another checkout's code (front end and actors) on the same rows, for a before / after.
Peak memory: the front end's (``wait4``'s maxrss) and the largest actor's (its RSS sampled every 0.2 s, its USS every
second); CPU: the front end's, the actors' together (sampled likewise: their last 0.2 s may be missed; also their
system time alone, ``actors_system_s``, and their minor page faults, ``actors_minor_faults``, from ``/proc``), and
how busy the machine's cores were over the run (``machine_busy``: 1.0 is every core busy all the time, whatever ran
on them). With ``--repeat``, each figure is the median of the runs; ``wall_s_runs`` lists every run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_scaling import start_head  # noqa: E402

FAMILIES = "rotation,scale_pad,overlay"
#: Samples (0.2 s apart) between two readings of an actor's USS, which cost far more than its RSS.
USS_EVERY = 5


def project(folder: Path, code: Path, rows: int, size: tuple[int, int]) -> Path:
    """A gate project in ``folder``: ``code``'s robustness tests, ``rows`` photo rows, limits that set none."""
    from laya_robustness.recipes.bench import write_photo_rows

    shutil.copytree(code / "robustness_tests", folder / "robustness_tests",
                    ignore=shutil.ignore_patterns("__snapshots__", "__pycache__"))
    write_photo_rows(folder / "rows", rows, size=size)
    (folder / "limits.toml").write_text("version = 1\n[families.orig]\nmin_acc = 0.0\n")
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    return folder


class ActorMemory(threading.Thread):
    """The largest RSS of any Ray actor process (``ray::ScoringActor``) seen while it runs, the largest USS (the
    pages no other process maps), and the largest of each part of RSS (``/proc/<pid>/status``: ``RssAnon``, the
    process's own heap; ``RssShmem``, the pages of Ray's shared object store it maps), the actor's and the front
    end's (``front``, its pid, once started)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.peak_uss, self.done = 0, 0, threading.Event()
        self.cpu: dict[int, tuple[float, float, int]] = {}  # actor pid -> (user s, system s, minor faults) last seen
        self.front: int | None = None
        self.parts = {"actor": {"RssAnon": 0, "RssShmem": 0}, "front": {"RssAnon": 0, "RssShmem": 0}}

    def _parts(self, who: str, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key in self.parts[who]:
                        self.parts[who][key] = max(self.parts[who][key], int(value.split()[0]) * 1024)
        except OSError:
            pass

    def run(self) -> None:
        import psutil

        samples = 0
        while not self.done.wait(0.2):
            samples += 1
            if self.front is not None:
                self._parts("front", self.front)
            for process in psutil.process_iter(["cmdline"]):
                if "ScoringActor" not in " ".join(process.info["cmdline"] or []):
                    continue
                try:
                    rss = process.memory_info().rss
                    # USS walks the page tables of every mapping (smaps), the object store's gigabytes included:
                    # read every 0.2 s from four actors, it took 6% of a run's CPU samples on two cores (perf)
                    uss = process.memory_full_info().uss if samples % USS_EVERY == 1 else 0
                    times = process.cpu_times()
                    with open(f"/proc/{process.pid}/stat") as fh:
                        minor_faults = int(fh.read().rpartition(")")[2].split()[7])
                except (psutil.Error, OSError):
                    continue
                self.peak, self.peak_uss = max(self.peak, rss), max(self.peak_uss, uss)
                self._parts("actor", process.pid)
                self.cpu[process.pid] = (times.user, times.system, minor_faults)


def gate(folder: Path, code: Path, per_row: float, report: str, executor_args: list[str]) -> dict:
    """One gate run: its wall seconds, the front end's CPU seconds and peak RSS, the largest actor RSS, rows."""
    path = f"{code}{os.pathsep}{TESTS}"
    env = {**os.environ, "PYTHONPATH": path, "LAYA_SLOW_PER_ROW": str(per_row), "HF_HUB_OFFLINE": "1",
           "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"env_vars": {
               "PYTHONPATH": path, "LAYA_SLOW_PER_ROW": str(per_row)}}})}
    cmd = [sys.executable, "-m", "pytest", "robustness_tests", "-q", "--scorer", "helpers.fakes:pixels",
           "--model", "fake", "--data", "rows", "--thresholds", "limits.toml", "--families", FAMILIES,
           "--report-dir", report, "-k", "not (snapshot or benchmark or invariance or gpu)", *executor_args]
    import psutil

    memory = ActorMemory()
    memory.start()
    busy_before = _busy_seconds(psutil.cpu_times())
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    memory.front = process.pid
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    busy = _busy_seconds(psutil.cpu_times()) - busy_before
    memory.done.set()
    memory.join()
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(out.decode()[-4000:])
    import gzip

    with gzip.open(folder / report / "predictions.jsonl.gz", "rb") as fh:
        rows = sum(1 for _ in fh)
    return {"wall_s": wall, "front_cpu_s": usage.ru_utime + usage.ru_stime, "front_rss_mib": usage.ru_maxrss / 1024,
            "actor_rss_mib": memory.peak / 2**20, "actor_uss_mib": memory.peak_uss / 2**20, "rows": rows,
            "actors_cpu_s": sum(u + s for u, s, _ in memory.cpu.values()),
            "actors_system_s": sum(s for _, s, _ in memory.cpu.values()),
            "actors_minor_faults": sum(f for _, _, f in memory.cpu.values()), "machine_busy": busy / (wall * (os.cpu_count() or 1)),
            **{f"{who}_{part.lower()}_mib": n / 2**20 for who, parts in memory.parts.items() for part, n in parts.items()},
            "predictions": (folder / report / "predictions.jsonl.gz").read_bytes()}


def _busy_seconds(times) -> float:
    """CPU seconds the machine's cores spent on anything but idling (``psutil.cpu_times()``, all cores)."""
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,2,4", help="pool sizes, comma-separated (default: 1,2,4)")
    parser.add_argument("--rows", default="60", help="photo rows, comma-separated (default: 60)")
    parser.add_argument("--size", default="800x600", help="photo size (default: 800x600)")
    parser.add_argument("--per-row", type=float, default=0.02, help="seconds each scored row costs (default: 0.02)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration; medians (default: 1)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.actors.split(",")]
    size = tuple(int(n) for n in args.size.split("x"))
    results = {}
    with tempfile.TemporaryDirectory(prefix="ray-gate-") as temp:
        head, address = start_head(max(sizes), Path(temp))
        try:
            for n_rows in [int(n) for n in args.rows.split(",")]:
                folder = project(Path(temp) / f"rows{n_rows}", args.code.resolve(), n_rows, size)
                local = gate(folder, args.code.resolve(), args.per_row, "local", ["-n", "0"])
                runs = {"local": [local]}
                for n in sizes:
                    runs[n] = [gate(folder, args.code.resolve(), args.per_row, f"ray{n}-{i}",
                                    ["--executor", "ray", "--ray-address", address, "--ray-actors", str(n)])
                               for i in range(args.repeat)]
                    assert all(r["predictions"] == local["predictions"] for r in runs[n]), f"{n} actors differ"
                results[n_rows] = {str(k): {key: round(statistics.median(r[key] for r in v), 3)
                                            for key in ("wall_s", "front_cpu_s", "front_rss_mib", "actor_rss_mib",
                                                        "actor_uss_mib", "front_rssanon_mib", "front_rssshmem_mib",
                                                        "actor_rssanon_mib", "actor_rssshmem_mib", "actors_cpu_s",
                                                        "actors_system_s", "actors_minor_faults",
                                                        "machine_busy", "rows")}
                                    | {"wall_s_runs": [round(r["wall_s"], 3) for r in v]}
                                    for k, v in runs.items()}
                for k, v in results[n_rows].items():
                    v["front_cpu_s_per_1000_rows"] = round(1000 * v["front_cpu_s"] / v["rows"], 3)
                one = results[n_rows].get(str(sizes[0]))
                for n in sizes:
                    results[n_rows][str(n)]["wall_ratio_to_first"] = round(
                        results[n_rows][str(n)]["wall_s"] / one["wall_s"], 3)
        finally:
            head.send_signal(signal.SIGTERM)
            head.wait(timeout=60)
    print(json.dumps({"code": str(args.code), "families": FAMILIES, "size": args.size, "per_row": args.per_row,
                      "repeat": args.repeat, "predictions_identical_to_local": True, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
