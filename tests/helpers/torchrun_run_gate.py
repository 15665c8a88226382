"""``run_gate(executor="distributed")`` on each rank of a world of 2 CPU processes (gloo), run by
``tests/run/test_distributed_trust.py``: ``python -m torch.distributed.run --nproc_per_node 2
tests/helpers/torchrun_run_gate.py <case> <out>``, or started by hand as two processes (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``: a world outside torchrun, whose agent would otherwise end every rank when one dies).

``weights``: rank 1 is given other weights (``tiny-smolvlm-seed2``). ``rows``: rank 1 is given the fixture rows with
every label shifted by one option. ``resume``: each rank journals in a folder of its own (as on machines that share
no disk); rank 1's scoring breaks at its second chunk, then both resume. ``killed``: rank 1 kills itself (SIGKILL) in
its first chunk. ``stalled``: rank 1 sleeps in its first chunk.

Each rank writes ``<out>/rank<r>.json``: the error each run raised (its type and message), the exit status and
``complete`` of each run that returned, and the seconds each took; rank 0 also gates the same rows with the local
executor (``<out>/local``), to compare with.
"""

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import torch.distributed as dist

from laya_robustness import run_gate
from laya_robustness.run.pipeline import chunks

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
GATE = {"families": ["text"], "rows_per_set": 4, "batch_size": 2, "invariance": False, "root": ROOT}
_records = chunks.Scoring.records


def shifted_rows(out: Path) -> Path:
    """A copy of the fixture rows with every choice label moved to the next option."""
    folder = out / "shifted"
    shutil.copytree(ROOT / "laya_fixtures" / "rows" / "images", folder / "images")
    for path in sorted((ROOT / "laya_fixtures" / "rows").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for row in rows:
            row["label"] = (row["label"] + 1) % len(row["options"])
        (folder / path.name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def breaking(at: int, then):
    """``Scoring.records`` that calls ``then()`` at its ``at``-th chunk (counting from 1)."""
    seen = [0]

    def records(self, rows):
        seen[0] += 1
        if seen[0] == at:
            then()
        return _records(self, rows)
    return records


def gated(out: Path, rank: int, **options) -> dict:
    """One run's account: its error, or its exit status and whether its summary says it is complete."""
    start = time.monotonic()
    try:
        options = {"model": MODEL, **GATE, **options}
        result = run_gate(report_dir=out / "reports" if rank == 0 else None, **options)
        told = {"exit_status": result.exit_status, "complete": result.summary.get("meta", {}).get("complete")}
    except Exception as exc:  # noqa: BLE001  (the test reads what each rank was told)
        told = {"error": type(exc).__name__, "message": str(exc)}
    return {**told, "seconds": round(time.monotonic() - start, 1)}


def main(case: str, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = ROOT / "laya_fixtures" / "rows"
    runs = []
    if case == "weights":
        model = ROOT / "laya_fixtures" / ("tiny-smolvlm-seed2" if rank == 1 else "tiny-smolvlm")
        runs.append(gated(out, rank, model=model, data=data, executor="distributed"))
    elif case == "rows":
        runs.append(gated(out, rank, data=shifted_rows(out) if rank == 1 else data, executor="distributed"))
    elif case == "resume":
        journal = out / f"journal-r{rank}"
        if rank == 1:
            chunks.Scoring.records = breaking(2, lambda: (_ for _ in ()).throw(RuntimeError("injected on rank 1")))
        runs.append(gated(out, rank, data=data, executor="distributed", journal=journal))
        chunks.Scoring.records = _records
        shutil.rmtree(out / "reports", ignore_errors=True)
        runs.append(gated(out, rank, data=data, executor="distributed", journal=journal, resume=True))
    elif case in ("killed", "stalled"):
        if rank == 1:
            chunks.Scoring.records = breaking(1, (lambda: os.kill(os.getpid(), signal.SIGKILL)) if case == "killed"
                                              else (lambda: time.sleep(3600)))
        runs.append(gated(out, rank, data=data, executor="distributed"))
    if rank == 0 and case in ("resume", "rows", "weights"):
        run_gate(MODEL, data=data, executor="local", report_dir=out / "local", **GATE)
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "runs": runs}))
    if case in ("killed", "stalled"):
        os._exit(0)  # the world is broken: no barrier to meet
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
