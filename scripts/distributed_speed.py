"""How long one evaluation of ``RobustnessCallback`` takes on 1 rank and on N ranks of a ``torchrun`` world (gloo, the
model whole on each rank, as under DDP), the same model and rows: the ratio is what sharing the chunks saves.

    python scripts/distributed_speed.py [--ranks 2] [--rows-per-set 40] [--families all]

Each world gates the embedded tiny SmolVLM at two evaluations (steps 1 and 2, the same weights); the first also
builds the rows' variants, the second reuses them (as every later evaluation of a training run does). Printed: the
seconds of each evaluation on rank 0 (the one that also writes the reports), per world, and the ratios. One rank
uses every core (torch's own threads); torchrun gives each of N > 1 ranks one thread. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_program(out: Path, rows_per_set: int, families: str) -> None:
    """One rank of a world: gate twice, rank 0 writes the seconds of each evaluation to ``out``."""
    import torch.distributed as dist
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from laya_robustness.training import RobustnessCallback

    dist.init_process_group("gloo")
    model_dir = ROOT / "laya_fixtures" / "tiny-smolvlm"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(model_dir)
    options = {} if families == "all" else {"families": families.split(",")}
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=out.parent / "robustness",
                                  root=ROOT, rows_per_set=rows_per_set, **options)
    seconds = []
    for step in (1, 2):
        dist.barrier()
        started = time.perf_counter()
        result = callback.gate(model, processor, step)
        seconds.append(time.perf_counter() - started)
    if dist.get_rank() == 0:
        records = sum(len(report.records) for report in result.outcome.reports.values())
        out.write_text(json.dumps({"seconds": seconds, "records": records, "threads": os.environ.get(
            "OMP_NUM_THREADS", "torch's default")}))
    dist.destroy_process_group()


def world(ranks: int, rows_per_set: int, families: str) -> dict:
    """Run one world of ``ranks`` processes; rank 0's account."""
    with tempfile.TemporaryDirectory(prefix="laya-speed-") as folder:
        out = Path(folder) / "times.json"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                        str(ranks), __file__, "--rank-program", str(out), "--rows-per-set", str(rows_per_set),
                        "--families", families], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows-per-set", type=int, default=40)
    parser.add_argument("--families", default="all", help="comma-separated families, or all")
    parser.add_argument("--rank-program", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_program is not None:
        return rank_program(args.rank_program, args.rows_per_set, args.families)
    one = world(1, args.rows_per_set, args.families)
    many = world(args.ranks, args.rows_per_set, args.families)
    print(f"records per evaluation: {one['records']}")
    for i, label in enumerate(("first evaluation (builds the variants)", "later evaluation")):
        print(f"{label}: 1 rank {one['seconds'][i]:.2f} s, {args.ranks} ranks {many['seconds'][i]:.2f} s, "
              f"ratio {many['seconds'][i] / one['seconds'][i]:.2f}")


if __name__ == "__main__":
    main()
