"""Peak resident memory of the gate as the rows grow: photo rows through image, shift and pad_crop.

For each row count, writes that many 640 x 480 JPEG photo rows with a seeded generator into a temp dir
(``laya_robustness.recipes.bench.write_photo_rows``), runs the family tests of the gate on them in a
process of its own on the embedded default model, and reads that process's peak RSS from ``os.wait4``.
Prints one JSON line per count and the ratio of the last to the first.

    OMP_NUM_THREADS=1 python scripts/stream_memory.py --rows 50 200
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

from laya_robustness.recipes.bench import write_photo_rows

FAMILIES = "image,shift,pad_crop"


def gate_command(data: Path, report_dir: Path, families: str, extra: list[str]) -> list[str]:
    """The gate's family tests on ``data`` (every row), writing its reports to ``report_dir``."""
    return [sys.executable, "-m", "pytest", "robustness_tests/test_families.py", "-q", "-p", "no:randomly",
            "-p", "no:cacheprovider", "--data", str(data), "--families", families, "--report-dir", str(report_dir),
            *extra]


def measure(n_rows: int, families: str, extra: list[str]) -> dict:
    """Peak RSS (bytes) and wall time of one gate process on ``n_rows`` photo rows."""
    with tempfile.TemporaryDirectory(prefix="laya-stream-") as tmp:
        data = Path(tmp) / "data"
        write_photo_rows(data, n_rows)
        started = time.perf_counter()
        child = subprocess.Popen(gate_command(data, Path(tmp) / "reports", families, extra),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
    tail = out.decode(errors="replace").strip().splitlines()[-1:]
    return {"rows": n_rows, "families": families, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "exit": os.waitstatus_to_exitcode(status), "wall_s": round(seconds, 1), "last_line": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--families", default=FAMILIES)
    parser.add_argument("extra", nargs="*", help="more gate options (after --)")
    args = parser.parse_args(argv)
    results = [measure(n, args.families, args.extra) for n in args.rows]
    for result in results:
        print(json.dumps(result, sort_keys=True))
    first, last = results[0]["peak_rss_bytes"], results[-1]["peak_rss_bytes"]
    print(json.dumps({"ratio_last_to_first": round(last / first, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
