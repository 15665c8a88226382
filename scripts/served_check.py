"""The served-model numbers: requests/s at two concurrencies (the gate's own benchmark), and how often the
served answers agree with the in-process scorer's greedy generation on the rows a gate run asks.

    python scripts/served_check.py --out /tmp/served-check            # starts transformers serve itself
    python scripts/served_check.py --endpoint http://127.0.0.1:8000/v1 --rows-per-set 24 --out DIR
    python scripts/served_check.py --predictions gate/predictions.jsonl.gz --out DIR   # answers a gate run recorded

Starts ``transformers serve laya_fixtures/tiny-smolvlm`` on a free 127.0.0.1 port unless ``--endpoint`` is
given (then that server must serve the embedded checkpoint), runs ``test_served_throughput`` of the gate with
``--concurrency`` 1 and 8 (pytest-benchmark JSON in OUT), and compares, row by row, the option each served answer
names with the option the embedded scorer's ``generate`` names on the variant rows of the default question
families (``--rows-per-set`` source rows per set, seed 0). Writes OUT/served_check.json and prints it. Timings
depend on what else runs on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def throughput(endpoint: str, concurrency: int, out: Path) -> dict:
    """The gate's served benchmark at ``concurrency``: rows, requests/s (mean of 3 rounds), retries."""
    path = out / f"bench-served-c{concurrency}.json"
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-q", "--scorer",
               "openai", "--endpoint", endpoint, "--concurrency", str(concurrency), "--benchmark-only",
               "-k", "served_throughput", f"--benchmark-json={path}"]
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    bench = json.loads(path.read_text())["benchmarks"][0]
    return {**bench["extra_info"], "mean_s": bench["stats"]["mean"]}


def variant_rows(rows_per_set: int) -> list:
    from laya_robustness.families import build_variants, default_families, get_family
    from laya_robustness.run.inputs.run_inputs import InputSpec, source_rows

    rows = source_rows(InputSpec(ROOT / "laya_fixtures" / "rows", rows_per_set, 0))
    out = [r for name in sorted(rows) for r in rows[name]]
    for family in default_families():
        if get_family(family).source == "rows":
            out += [v for name in sorted(rows) for v in build_variants(family, rows[name], 0)]
    return out


def recorded_answers(predictions: Path, rows: list) -> list:
    """The served answers a gate run recorded (raw_answer and argmax by row id) for these rows."""
    from laya_robustness.predictions import read_predictions
    from laya_robustness.records import UNPARSED_ANSWER
    from laya_robustness.scoring.base import Answer

    by_id = {r["row_id"]: r for r in read_predictions(predictions)}
    return [Answer(by_id[r.row_id]["raw_answer"], None if by_id[r.row_id]["argmax"] == UNPARSED_ANSWER
                   else by_id[r.row_id]["argmax"], by_id[r.row_id]["extraction"]) for r in rows]


def agreement(endpoint: str | None, rows_per_set: int, predictions: Path | None = None) -> dict:
    """Served answers (asked now, or as a gate run recorded them) against the embedded scorer's greedy
    ``generate`` on the same rows, by option and by text."""
    from laya_robustness.scoring.base import label_choice
    from laya_robustness.scoring.extraction import extract
    from laya_robustness.scoring.hf import HFVLMScorer
    from laya_robustness.scoring.served import ServedScorer

    rows = variant_rows(rows_per_set)
    started = time.time()
    served = recorded_answers(predictions, rows) if predictions else ServedScorer.connect(endpoint).answers(rows)
    served_s = time.time() - started
    local_scorer = HFVLMScorer.from_pretrained(str(ROOT / "laya_fixtures" / "tiny-smolvlm"))
    started = time.time()
    local = local_scorer.generate(rows, max_new_tokens=16)
    local_s = time.time() - started
    differ = []
    for row, a, text in zip(rows, served, local):
        choice = label_choice(row, extract(text, row.shown_options, row.primitive).index)
        if a.choice != choice:
            differ.append({"row_id": row.row_id, "family": row.family, "served": a.text, "in_process": text})
    same_text = sum(a.text == t for a, t in zip(served, local))
    return {"rows": len(rows), "same_option": len(rows) - len(differ), "share": 1 - len(differ) / len(rows),
            "same_text": same_text,
            "same_text_stripped": sum(a.text.strip() == t.strip() for a, t in zip(served, local)),
            "served_extraction": dict(Counter(a.extraction for a in served)), "differ": differ[:50],
            "differ_by_family": dict(Counter(d["family"] for d in differ)), "served_s": served_s,
            "in_process_generate_s": local_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="a server of the embedded checkpoint (default: start one)")
    parser.add_argument("--rows-per-set", type=int, default=24)
    parser.add_argument("--predictions", type=Path, help="the served answers of a gate run of the default "
                        "families with the same --rows-per-set (seed 0), instead of asking the server again")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    server = None
    if args.endpoint is None:
        from helpers.served_parts import ServedModel

        server = ServedModel(args.out).start()
    endpoint = args.endpoint or server.url
    try:
        result = {"endpoint": endpoint, "throughput": {c: throughput(endpoint, c, args.out) for c in (1, 8)},
                  "agreement": agreement(endpoint, args.rows_per_set, args.predictions)}
    finally:
        if server is not None:
            server.stop()
    (args.out / "served_check.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
