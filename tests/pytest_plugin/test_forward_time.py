"""scripts/forward_time.py: its split of a gate run's wall time adds up (model + harness, paid once + per row)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECONDS = r"([0-9.]+) s"


def _seconds(line: str, name: str) -> float:
    match = re.search(rf"{name} {SECONDS}", line)
    assert match, f"no {name!r} in {line!r}"
    return float(match.group(1))


def test_forward_time_splits_the_wall_time_into_parts_that_add_up(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "robustness_tests", "-p", "forward_time", "-p", "no:cacheprovider", "-q",
         "-k", "test_orig", "--report-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = next(line for line in done.stdout.splitlines() if line.startswith("forward time:"))
    second = next(line for line in done.stdout.splitlines() if line.startswith("harness:"))

    session, model, rest = _seconds(first, "session"), _seconds(first, "model forwards"), \
        _seconds(first, "everything else")
    parts = [_seconds(first, k) for k in ("language model", "token embeddings", "vision encoder", "lm head")]
    assert model > 0 and _seconds(first, "language model") > 0
    assert abs(model + rest - session) <= 0.15  # each printed to 0.1 s
    assert abs(sum(parts) - model) <= 0.25

    once, per_row = _seconds(second, "paid once"), _seconds(second, "per-row work")
    fixed = [_seconds(second, k) for k in ("start-up", "imports", "model loading", "reports", "benchmarks")]
    assert _seconds(second, "imports") > 0 and _seconds(second, "reports") > 0
    assert abs(once + per_row - rest) <= 0.15
    assert abs(sum(fixed) - once) <= 0.3
