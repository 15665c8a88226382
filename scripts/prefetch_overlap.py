"""The device kept busy while the next chunks are made (``run.pipeline.prefetch``): whole gate runs with chunks made
when asked for (before: ``LAYA_PREFETCH_CHUNKS=0``) and made ahead (after: the default), taken in turns.

Three measurements over photo rows of ``--size`` through the pixel families ``--families``, each a before / after
pair per round (``--repeat`` rounds; medians), every run in a process of its own:

- ``local``: ``--executor local`` with a device-bound scorer (``tests/helpers/fakes.py``'s ``PixelScorer``:
  ``--per-row`` seconds of sleep a row, a hash of every pixel). Its wall against max(device time, build time): device
  time is the rows scored x ``--per-row``; build time is what the run spent building the variants (``family_variants``)
  and making the chunks' pixels (``rows_with_pixels``), read from the run before (where they take turns with the
  device); also the device's idle time per chunk (the gaps between one chunk's scoring and the next).
- ``ray``: the same on a one-node Ray head this script starts, ``--actors`` (first and last) compared: the wall of
  the most actors as a share of the fewest's.
- ``memory``: peak RSS (``wait4``) of the local run with no device time at each of ``--memory-rows`` rows (image,
  shift and pad_crop on 640 x 480 photos, as ``scripts/stream_memory.py``): the last against the first.

With ``--model DIR --device cuda`` the local measurement scores with that checkpoint instead (its device time is the
time spent in ``Scoring.records`` in the run before); ``scripts/gpu_check.sh`` runs it on a SmolVLM-256M-shaped
model. Every run's predictions are compared: with the fake scorer they must be the same bytes. Prints one JSON
object::

    python scripts/prefetch_overlap.py --rows 120 --per-row 0.02 --repeat 2
    python scripts/prefetch_overlap.py --sections local --model /tmp/smolvlm-256m-shaped --device cuda --repeat 2
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
FAMILIES = "rotation,scale_pad,overlay"
MEMORY_FAMILIES, MEMORY_SIZE = "image,shift,pad_crop", (640, 480)
LIMITS = "version = 1\n[families.orig]\nmin_acc = 0.0\n"


# -- one run, in a process of its own ----------------------------------------------------------------------------


def instrument() -> dict:
    """Time the run's parts in this process: each ``Scoring.records`` call (start, end), and the seconds spent
    building variants and making chunks' pixels."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from forward_time import _timed

    from laya_robustness.run import planned
    from laya_robustness.run.executors import local_stream
    from laya_robustness.run.pipeline import chunks

    spent = {"records": [], "family_variants": 0.0, "pixels": 0.0}
    for module, name, key in ((planned, "family_variants", "family_variants"), (chunks, "rows_with_pixels", "pixels"),
                              (local_stream, "rows_with_pixels", "pixels")):
        _timed(module, name, key, spent)
    records = chunks.Scoring.records

    def spanned(self, rows):
        start = time.perf_counter()
        try:
            return records(self, rows)
        finally:
            spent["records"].append((start, time.perf_counter(), len(rows)))

    chunks.Scoring.records = spanned
    return spent


def child(args) -> None:
    """One gate run here (``run_gate``), timed; prints its figures as JSON."""
    import laya_robustness

    sys.path.insert(0, str(TESTS))
    spent = instrument()
    folder = Path(args.report)
    (folder.parent / "limits.toml").write_text(LIMITS)
    scorer = {} if args.model else {"scorer": "helpers.fakes:pixels"}
    executor = {"executor": "ray", "ray_address": args.ray_address, "ray_actors": args.ray_actors} \
        if args.ray_address else {}
    start = spent["start"] = time.perf_counter()
    laya_robustness.run_gate(model=args.model or "fake", data=args.data, families=args.families, invariance=False,
                             thresholds=folder.parent / "limits.toml", report_dir=folder, device=args.device,
                             **scorer, **executor)
    wall = time.perf_counter() - start
    with gzip.open(folder / "predictions.jsonl.gz", "rb") as fh:
        predictions = fh.read()
    print(json.dumps({"wall_s": wall, "rows": predictions.count(b"\n"), **spans(spent),
                      "predictions_sha256": hashlib.sha256(predictions).hexdigest()}))


def spans(spent: dict) -> dict:
    """The build seconds, the seconds in ``Scoring.records`` and the device's idle gaps between chunks."""
    calls = sorted(spent["records"])
    gaps = [b[0] - a[1] for a, b in zip(calls, calls[1:])]
    return {"build_s": spent["family_variants"] + spent["pixels"], "family_variants_s": spent["family_variants"],
            "pixels_s": spent["pixels"], "records_s": sum(end - start for start, end, _ in calls),
            "chunks": len(calls), "idle_per_chunk_ms": 1000 * statistics.mean(gaps) if gaps else None,
            "idle_gaps_ms": [round(1000 * gap) for gap in gaps],
            "before_first_s": calls[0][0] - spent["start"] if calls else None}


def run(args, data: Path, report: Path, ahead: int, per_row: float, families: str, ray: tuple = ()) -> dict:
    """One child run with ``ahead`` chunks made ahead: its figures and its peak RSS (MiB, ``wait4``)."""
    env = {**os.environ, "LAYA_PREFETCH_CHUNKS": str(ahead), "LAYA_SLOW_PER_ROW": str(per_row),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": {"env_vars": {
        key: env[key] for key in ("PYTHONPATH", "LAYA_SLOW_PER_ROW", "LAYA_PREFETCH_CHUNKS")}}})
    cmd = [sys.executable, __file__, "child", "--data", str(data), "--report", str(report), "--families", families,
           "--device", args.device, *(["--model", args.model] if args.model else [])]
    if ray:
        cmd += ["--ray-address", ray[0], "--ray-actors", str(ray[1])]
    report.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{report}.log", "w") as log:
        process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log)
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(Path(f"{report}.log").read_text()[-4000:])
    return {**json.loads(out.decode().strip().splitlines()[-1]), "peak_rss_mib": usage.ru_maxrss / 1024}


# -- the three measurements -------------------------------------------------------------------------------------


def turns(args, make_run) -> dict[int, list[dict]]:
    """``make_run(ahead, round)`` for each round, before (0 chunks ahead) then after (``--ahead``), in turns."""
    runs: dict[int, list[dict]] = {0: [], args.ahead: []}
    for number in range(args.repeat):
        for ahead in runs:
            runs[ahead].append(make_run(ahead, number))
    return runs


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def local(args, data: Path, temp: Path) -> dict:
    """Local runs before and after: wall against max(device time, build time), idle per chunk."""
    runs = turns(args, lambda ahead, n: run(args, data, temp / f"local-{ahead}-{n}", ahead, args.per_row,
                                             args.families))
    before = runs[0]
    device = median(before, "records_s") if args.model else median(before, "rows") * args.per_row
    build = median(before, "build_s")
    out = {"device_s": round(device, 3), "build_s": build, "identical": same(runs)}
    for ahead, taken in runs.items():
        figures = {key: median(taken, key) for key in ("wall_s", "build_s", "records_s", "idle_per_chunk_ms",
                                                       "chunks", "rows")}
        figures["wall_to_max"] = round(figures["wall_s"] / max(device, build), 3)
        figures["wall_to_sum"] = round(figures["wall_s"] / (device + build), 3)
        figures["wall_s_runs"] = [round(r["wall_s"], 2) for r in taken]
        figures["idle_gaps_ms_runs"] = [r["idle_gaps_ms"] for r in taken]
        out[label(ahead)] = figures
    return out


def ray(args, data: Path, temp: Path) -> dict:
    """Ray runs before and after on the fewest and the most actors: the most's wall as a share of the fewest's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ray_scaling import start_head

    sizes = [int(n) for n in args.actors.split(",")]
    head, address = start_head(max(sizes), temp)
    try:
        runs = turns(args, lambda ahead, n: {size: run(args, data, temp / f"ray{size}-{ahead}-{n}", ahead,
                                                       args.per_row, args.families, (address, size))
                                             for size in sizes})
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
    out = {"identical": same([r[size] for r in rounds] for rounds in runs.values() for size in sizes)}
    for ahead, rounds in runs.items():
        walls = {size: median([r[size] for r in rounds], "wall_s") for size in sizes}
        out[label(ahead)] = {"wall_s": walls, "ratio": round(walls[sizes[-1]] / walls[sizes[0]], 3),
                             "wall_s_runs": {size: [round(r[size]["wall_s"], 2) for r in rounds] for size in sizes}}
    return out


def memory(args, temp: Path) -> dict:
    """Peak RSS before and after at each row count (no device time): the last count's against the first's."""
    from laya_robustness.recipes.bench import write_photo_rows

    counts = [int(n) for n in args.memory_rows.split(",")]
    out: dict = {"families": MEMORY_FAMILIES, "size": "x".join(map(str, MEMORY_SIZE))}
    for count in counts:
        data = temp / f"memory{count}"
        write_photo_rows(data, count, size=MEMORY_SIZE)
        runs = turns(args, lambda ahead, n: run(args, data, temp / f"mem{count}-{ahead}-{n}", ahead, 0.0,
                                                 MEMORY_FAMILIES))
        out[count] = {label(ahead): {"peak_rss_mib": median(taken, "peak_rss_mib"),
                                     "wall_s": median(taken, "wall_s")} for ahead, taken in runs.items()}
        out[count]["identical"] = same(runs)
    for ahead in (0, args.ahead):
        first, last = (out[c][label(ahead)]["peak_rss_mib"] for c in (counts[0], counts[-1]))
        out[f"{label(ahead)}_last_to_first"] = round(last / first, 3)
    return out


def label(ahead: int) -> str:
    return "before" if ahead == 0 else f"after_{ahead}_ahead"


def same(groups) -> bool:
    """Whether every run of every group wrote the same predictions."""
    digests = {r["predictions_sha256"] for group in (groups.values() if isinstance(groups, dict) else groups)
               for r in group}
    return len(digests) == 1


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        return child(child_arguments().parse_args(sys.argv[2:]))
    args = arguments().parse_args()
    sections = args.sections.split(",")
    out: dict = {"load_average_before": os.getloadavg(), "cpus": os.cpu_count(), "per_row": args.per_row,
                 "rows": args.rows, "size": args.size, "families": args.families, "repeat": args.repeat,
                 "model": args.model or "tests/helpers/fakes.py:PixelScorer", "device": args.device}
    with tempfile.TemporaryDirectory(prefix="prefetch-") as temp:
        from laya_robustness.recipes.bench import write_photo_rows

        data = write_photo_rows(Path(temp) / "rows", args.rows, size=tuple(map(int, args.size.split("x")))).parent
        for name, measure in (("local", lambda: local(args, data, Path(temp))),
                              ("ray", lambda: ray(args, data, Path(temp))),
                              ("memory", lambda: memory(args, Path(temp)))):
            if name in sections:
                out[name] = measure()
                print(json.dumps({name: out[name]}), file=sys.stderr, flush=True)
    out["load_average_after"] = os.getloadavg()
    if not args.model:
        assert all(out[s]["identical"] for s in ("local", "ray") if s in out), "predictions differ"
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="local,ray,memory", help="what to measure (default: all three)")
    parser.add_argument("--rows", type=int, default=120, help="photo rows (default: 120)")
    parser.add_argument("--size", default="800x600", help="photo size (default: 800x600)")
    parser.add_argument("--families", default=FAMILIES, help=f"families (default: {FAMILIES})")
    parser.add_argument("--per-row", type=float, default=0.02, help="device seconds a row (default: 0.02)")
    parser.add_argument("--actors", default="1,4", help="pool sizes compared (default: 1,4)")
    parser.add_argument("--memory-rows", default="240,720", help="row counts of the memory runs (default: 240,720)")
    parser.add_argument("--ahead", type=int, default=1, help="chunks made ahead after (default: 1)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of before / after (default: 1)")
    parser.add_argument("--model", default=None, help="a checkpoint to score with instead of the fake scorer")
    parser.add_argument("--device", default="cpu", help="the device (default: cpu)")
    parser.add_argument("--out", default=None, help="a file to write the JSON to as well")
    return parser


def child_arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("--data", "--report", "--families", "--device", "--model", "--ray-address"):
        parser.add_argument(name)
    parser.add_argument("--ray-actors", type=int)
    return parser


if __name__ == "__main__":
    main()
