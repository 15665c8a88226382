"""Profile one scoring pass of the photo workload: operator table, chrome trace, peak memory, rows/s.

    python scripts/profile_scorer.py MODEL_DIR --device cuda --out OUT_PREFIX

writes OUT_PREFIX.txt (operators by total time), OUT_PREFIX.trace.json and OUT_PREFIX.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--path", default="batch", choices=("batch", "predict_cached"))
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from laya_robustness.scoring import load_scorer
    from laya_robustness.recipes.bench import peak_memory_bytes, workload

    rows = workload(args.rows, args.image_size)
    scorer = load_scorer("hf", args.model, device=args.device)
    warm = rows[:1]
    scorer.replaced().score_batch(warm)  # kernels and allocator warm, the measured scorer starts cold
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    started = time.perf_counter()
    with profile(activities=activities, record_shapes=False) as prof:
        if args.path == "batch":
            scorer.score_batch(rows)
        else:
            for row in rows:
                scorer.score_predict([row])
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    sort = "cuda_time_total" if args.device.startswith("cuda") else "cpu_time_total"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")
    prof.export_chrome_trace(str(out.with_suffix(".trace.json")))
    summary = {"path": args.path, "device": args.device, "rows": len(rows), "seconds": round(elapsed, 3),
               "rows_per_s": round(len(rows) / elapsed, 3), "peak_memory_bytes": peak_memory_bytes(args.device),
               "stats": scorer.stats, "note": "timed under the profiler (slower than an unprofiled run)"}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
