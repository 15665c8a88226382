"""How long one evaluation of ``RobustnessCallback`` takes in one process and on N ranks of a ``torchrun`` world (gloo,
the model whole on each rank, as under DDP), the same model and rows: the ratio is what sharing the chunks saves.

    python scripts/distributed_speed.py [--ranks 2] [--rows-per-set 40] [--families all] [--evaluations 2] [--rounds 3]

Three setups gate the embedded tiny SmolVLM at ``--evaluations`` evaluations of the same weights: the first also
builds the rows' variants, a later one reuses them (as every later evaluation of a training run does).

- ``one process``: no ``torch.distributed`` world, torch's own threads (every core): a run on one rank that has the
  machine to itself;
- ``one rank, one thread``: the same with ``OMP_NUM_THREADS=1``, what torchrun gives each of N > 1 ranks: the time
  rank 0 of the N-rank world took when it gated alone while the other ranks waited;
- ``N ranks``: the world under torchrun, each rank its share; rank 0's seconds (it also writes the reports).

The three run one after another, in ``--rounds`` rounds: this machine's speed drifts by a fifth from one minute to
the next, so a ratio is taken within a round and the median over rounds is printed (and the range). Printed per
round: each setup's first evaluation and the median of its later ones; then the medians and the N-rank world's
ratio to each of the other two. Run it on a quiet machine (nothing else using the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_program(out: Path, rows_per_set: int, families: str, evaluations: int) -> None:
    """Gate ``evaluations`` times (in a torchrun world when launched by one); rank 0 writes each one's seconds."""
    import torch.distributed as dist
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from laya_robustness.training import RobustnessCallback

    launched = "WORLD_SIZE" in os.environ
    if launched:
        dist.init_process_group("gloo")
    model_dir = ROOT / "laya_fixtures" / "tiny-smolvlm"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(model_dir)
    options = {} if families == "all" else {"families": families.split(",")}
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=out.parent / "robustness",
                                  root=ROOT, rows_per_set=rows_per_set, **options)
    seconds = []
    for step in range(1, evaluations + 1):
        if launched:
            dist.barrier()
        started = time.perf_counter()
        result = callback.gate(model, processor, step)
        seconds.append(time.perf_counter() - started)
    if not launched or dist.get_rank() == 0:
        records = sum(len(report.records) for report in result.outcome.reports.values())
        out.write_text(json.dumps({"seconds": seconds, "records": records}))
    if launched:
        dist.destroy_process_group()


def setup_seconds(ranks: int, threads: int | None, args) -> dict:
    """One setup's account: ``ranks`` > 1 under torchrun, else one process (``threads``: OMP_NUM_THREADS)."""
    with tempfile.TemporaryDirectory(prefix="laya-speed-") as folder:
        out = Path(folder) / "times.json"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        env.pop("OMP_NUM_THREADS", None)
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] \
            if ranks > 1 else [sys.executable]
        subprocess.run([*launch, __file__, "--rank-program", str(out), "--rows-per-set", str(args.rows_per_set),
                        "--families", args.families, "--evaluations", str(args.evaluations)],
                       check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows-per-set", type=int, default=40)
    parser.add_argument("--families", default="all", help="comma-separated families, or all")
    parser.add_argument("--evaluations", type=int, default=2, help="evaluations per setup (at least 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three setups, one after another")
    parser.add_argument("--rank-program", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_program is not None:
        return rank_program(args.rank_program, args.rows_per_set, args.families, args.evaluations)
    world = f"{args.ranks} ranks"
    runs: dict[str, list[tuple[float, float]]] = {"one process": [], "one rank, one thread": [], world: []}
    for n in range(1, args.rounds + 1):
        for name, (ranks, threads) in (("one process", (1, None)), (world, (args.ranks, None)),
                                       ("one rank, one thread", (1, 1))):
            seconds = setup_seconds(ranks, threads, args)["seconds"]
            runs[name].append((seconds[0], statistics.median(seconds[1:])))
        print(f"round {n}: " + "; ".join(f"{name} {first:.2f} s / {later:.2f} s" for name, ((first, later), *_)
                                          in ((k, v[-1:]) for k, v in runs.items())), flush=True)
    for name, measured in runs.items():
        line = f"{name}: first evaluation {statistics.median(m[0] for m in measured):.2f} s, later " \
               f"{statistics.median(m[1] for m in measured):.2f} s (medians of {len(measured)} rounds)"
        if name != world:  # each round's ratio: the setups of one round ran one after another, under one load
            first = [w[0] / m[0] for w, m in zip(runs[world], measured)]
            later = [w[1] / m[1] for w, m in zip(runs[world], measured)]
            line += f"; {world} / this: first {statistics.median(first):.2f} ({min(first):.2f}-{max(first):.2f})" \
                    f", later {statistics.median(later):.2f} ({min(later):.2f}-{max(later):.2f})"
        print(line)


if __name__ == "__main__":
    main()
