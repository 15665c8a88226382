"""Wall time of --executor ray's actor pool against its number of actors, on a device-bound model in miniature.

Every row costs a fixed sleep (``tests/helpers/fakes.py``'s ``SlowScorer``), as a model bound by its device would
on one GPU per actor, so the numbers do not depend on how busy this machine's CPUs are. The script starts
its own one-node cluster (``ray start --head`` on 127.0.0.1 with ``--num-cpus`` logical CPUs, one per
actor), scores the same shards with each pool size and prints seconds and the ratio to one actor:

    python scripts/ray_scaling.py --actors 1,2,4 --per-row 0.025 --shards 16 --rows 12
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def start_head(cpus: int, temp: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = temp / "head.log"
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", str(cpus), "--include-dashboard", "false", "--temp-dir", str(temp),
           "--disable-usage-stats"]
    head = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    while "Ray runtime started" not in log.read_text():
        if head.poll() is not None:
            raise SystemExit(log.read_text())
        time.sleep(0.2)
    return head, f"127.0.0.1:{port}"


def seconds(shards, n_actors: int, per_row: float) -> float:
    """Wall time of scoring every shard once the pool's actors have loaded the scorer."""
    from helpers.fakes import slow_scoring

    from laya_robustness.run.executors.ray_pool import RayActorPool

    pool = RayActorPool({"rows": partial(slow_scoring, per_row)}, "cpu", n_actors, gpus=False, label="scaling")
    try:
        pool.prepare("rows")
        start = time.perf_counter()
        assert len(list(pool.records("rows", shards))) == len(shards)
        return time.perf_counter() - start
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,2,4", help="pool sizes, comma-separated (default: 1,2,4)")
    parser.add_argument("--per-row", type=float, default=0.025, help="seconds each row costs (default: 0.025)")
    parser.add_argument("--shards", type=int, default=16, help="shards scored (default: 16)")
    parser.add_argument("--rows", type=int, default=12, help="rows per shard (default: 12)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.actors.split(",")]
    sys.path.insert(0, str(TESTS))
    import ray

    from laya_robustness.loaders import load_rows

    rows = [r for rows in load_rows(ROOT / "laya_fixtures" / "rows").values() for r in rows]
    rows = (rows * (args.shards * args.rows // len(rows) + 1))[: args.shards * args.rows]
    shards = [rows[i:i + args.rows] for i in range(0, len(rows), args.rows)]
    with tempfile.TemporaryDirectory(prefix="ray-scaling-") as temp:
        head, address = start_head(max(sizes), Path(temp))
        try:
            ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}}, log_to_driver=False)
            times = {n: seconds(shards, n, args.per_row) for n in sizes}
            ray.shutdown()
        finally:
            head.send_signal(signal.SIGTERM)
            head.wait(timeout=60)
    device_seconds = len(rows) * args.per_row
    print(json.dumps({"rows": len(rows), "device_seconds": round(device_seconds, 3),
                      "seconds": {n: round(t, 3) for n, t in times.items()},
                      "ratio_to_one": {n: round(t / times[sizes[0]], 3) for n, t in times.items()}}, indent=1))


if __name__ == "__main__":
    main()
