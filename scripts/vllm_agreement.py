"""The gate's scorer through vLLM against the in-process scorer, on checkpoints of one's choosing; what vLLM's serving
settings change; and whether the scorer is the bottleneck.

    python scripts/vllm_agreement.py [--checkpoint DIR ...] [--random-seed N ...] [--rows-per-set 8]
                                     [--settings] [--throughput] [--concurrency 4]

For each checkpoint (a directory; ``--random-seed N`` builds the embedded architecture with random weights, seed N),
``laya-vllm-server`` (``scripts/build_vllm_venv.sh``) is started on 127.0.0.1 and the fixture rows' ``orig``,
``option_order``, ``text`` and ``image`` rows (``--rows-per-set`` source rows per set) are scored through it
(``ServedScorer``) and in process (``HFVLMScorer``, fp32, eager): argmax agreement and the largest change of a
probability. ``--settings`` restarts the server of the first checkpoint with prefix caching off and with chunked
prefill off and compares their logits with the default server's, bit for bit. ``--throughput`` replays the
scorer's own requests from a plain concurrent client (``--concurrency`` rows in flight, a row's requests in turn, as
the scorer sends them) and gives the scorer's rows/s over the plain client's. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("orig", "option_order", "text", "image")
SETTINGS = {"default": (), "prefix caching off": ("--no-enable-prefix-caching",),
            "chunked prefill off": ("--no-enable-chunked-prefill",)}


class Server:
    """``laya-vllm-server`` of ``model`` on a free port, with ``flags``; a context manager."""

    def __init__(self, model: Path, flags: tuple[str, ...], log: Path):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.command = [str(Path(sys.prefix) / "bin" / "laya-vllm-server"), "--model", str(model), "--host",
                        "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--seed", "0", *flags]
        self.log, self.url = log, f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "Server":
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        self.process = subprocess.Popen(self.command, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as reply:
                    if json.loads(reply.read()).get("data"):
                        return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("vLLM did not start in 600 s")

    def __exit__(self, *exc) -> None:
        os.killpg(self.process.pid, 15)
        self.process.wait(timeout=60)


def rows(rows_per_set: int) -> list:
    from laya_robustness.families import build_variants
    from laya_robustness.loaders import load_rows

    source = [r for name, rs in sorted(load_rows(ROOT / "laya_fixtures" / "rows").items()) for r in rs[:rows_per_set]]
    out = list(source)
    for family in FAMILIES[1:]:
        out += build_variants(family, source, seed=0)
    from laya_robustness.run.pipeline.image_store import rows_with_pixels

    return rows_with_pixels(out)


def softmax(logits) -> np.ndarray:
    x = np.asarray(logits, dtype=float)
    e = np.exp(x - x.max())
    return e / e.sum()


def compare(a: list, b: list) -> str:
    agree = np.mean([np.argmax(x) == np.argmax(y) for x, y in zip(a, b)])
    dp = [float(np.abs(softmax(x) - softmax(y)).max()) for x, y in zip(a, b)]
    return f"{len(a)} rows, argmax agreement {agree:.4f}, |dp| median {np.median(dp):.1e}, max {max(dp):.1e}"


def served(url: str, scored_rows: list, concurrency: int, record: list | None = None):
    """(logits per row, seconds, the scorer's identity) through the gate's scorer; ``record`` gets each row's
    requests."""
    from laya_robustness.scoring.served import ServedScorer

    scorer = ServedScorer.connect(url, concurrency=concurrency)
    if record is not None:
        call, local = scorer.transport.call, threading.local()

        def recorded(path, body=None, **kwargs):
            local.requests.append((path, body))
            return call(path, body, **kwargs)

        def answer(row, answer=scorer.protocol.answer):
            local.requests = []
            out = answer(row)
            record.append(local.requests)
            return out

        scorer.transport.call, scorer.protocol.answer = recorded, answer
    started = time.perf_counter()
    answers = scorer.answers(scored_rows)
    return [a.logits for a in answers], time.perf_counter() - started, scorer.identity


def plain(url: str, requests: list, concurrency: int) -> float:
    """Seconds a plain client takes to send ``requests`` (a list of each row's requests), ``concurrency`` rows at a
    time, each row's in turn."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def row(calls):
        for path, body in calls:
            request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type":
                                                                                      "application/json"})
            with opener.open(request, timeout=120) as reply:
                json.loads(reply.read())

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(row, requests))
    return time.perf_counter() - started


def random_checkpoint(seed: int, folder: Path) -> Path:
    """The embedded architecture with random weights (seed ``seed``), saved under ``folder``."""
    from laya_robustness.recipes.train_smolvlm import build_untrained, training_rows

    processor, model = build_untrained(training_rows(50, seed), seed)
    out = folder / f"random-seed{seed}"
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, action="append", default=[])
    parser.add_argument("--random-seed", type=int, action="append", default=[])
    parser.add_argument("--rows-per-set", type=int, default=8)
    parser.add_argument("--settings", action="store_true")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    from laya_robustness.scoring.hf import HFVLMScorer

    scored_rows = rows(args.rows_per_set)
    with tempfile.TemporaryDirectory(prefix="laya-vllm-") as folder:
        checkpoints = args.checkpoint + [random_checkpoint(s, Path(folder)) for s in args.random_seed]
        for n, checkpoint in enumerate(checkpoints or [ROOT / "laya_fixtures" / "tiny-smolvlm"]):
            local = HFVLMScorer.from_pretrained(str(checkpoint)).score_batch(scored_rows)
            record: list = []
            with Server(checkpoint, (), Path(folder) / "vllm.log") as server:
                logits, seconds, identity = served(server.url, scored_rows, args.concurrency, record)
                print(f"{checkpoint.name}: {identity['scored']}: {compare(logits, local)}", flush=True)
                if args.throughput and n == 0:
                    plain_s = plain(server.url, record, args.concurrency)
                    print(f"  throughput at concurrency {args.concurrency}: the scorer {len(scored_rows) / seconds:.1f}"
                          f" rows/s, a plain client {len(scored_rows) / plain_s:.1f} rows/s, ratio "
                          f"{plain_s / seconds:.2f}", flush=True)
            if args.settings and n == 0:
                for name, flags in list(SETTINGS.items())[1:]:
                    with Server(checkpoint, flags, Path(folder) / "vllm.log") as server:
                        other = served(server.url, scored_rows, args.concurrency)[0]
                    same = sum(np.array_equal(x, y) for x, y in zip(other, logits))
                    worst = max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(other, logits))
                    print(f"  {name}: {same} of {len(logits)} rows' logits bitwise the default server's, max "
                          f"|dlogit| {worst:.1e}", flush=True)


if __name__ == "__main__":
    main()
