"""Calibrate the gate: how often it goes red with the model unchanged, and how often it catches a planted regression.

``python -m laya_robustness calibrate-gate --seeds N`` runs the gate (``pytest robustness_tests``)
once per seed 0..N-1, the model unchanged. A seed changes every seeded variant (option order, the
random crop, the shuffled images, the borrowed distractors, the attack targets...) and the
bootstrap, so each run is the gate a release would see with another seed. The runs share one
journal (``--journal``, ``--resume``): a row whose content no seed changes is scored once. Per check
it counts the seeds where it failed, passed or was undecided, and the gate's family-wise false-alarm
rate is the share of seeds whose run was red (pytest exit status 1).

With ``--plant FAMILY``, every seed also runs the model with a planted regression in FAMILY
(``laya_robustness.scoring.planted``: a share ``--plant-rate`` of its answers moved to the runner-up)
against that seed's unchanged predictions as ``--baseline``. Two outcomes per seed: *caught*, one of
the family's regression checks fails (``max_regression`` on accuracy, or ``max_flip_regression`` on the
flip rate of a meaning-preserving family: the gate goes red); *detected*, the paired McNemar test on
accuracy finds the loss real at the gate's per-check level (p < alpha / m, more rows right -> wrong
than wrong -> right), whatever its size. With a tolerance above 0, a plant that costs less than it is
detected but, by the limit's own definition, not caught.

The regression checks' own false alarms: each seed's predictions are also compared with the previous
seed's, as ``--baseline`` would compare them (the same model on the other seed's variants of the same
rows: every difference is chance), and a comparison is red when a regression check fails. ``compare``'s own false
alarms on the same pairs: ``report.compare.compare`` of the two report folders, made comparable by giving the earlier
run the later run's seed (and data fingerprint: under ``--rows-per-set`` each seed samples other rows, and the pair
is judged on the rows both scored), red when its exit status is 1 (a regression beyond
noise, or a check that passed and now fails). With ``--plant``, compare's power: ``compare`` of each seed's run
against its planted run, red when it calls the planted family's regression.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

#: The gate's family and baseline tests only: the benchmarks, invariance and snapshot do not depend on the seed.
SELECTION = "not gpu and not benchmark and not invariance and not snapshot"
PLANTED_SCORER = "laya_robustness.scoring.planted:factory"
#: The checks against a --baseline whose failure means the gate caught a regression.
REGRESSION_CHECKS = ("max_regression", "max_flip_regression")


def run_gate(seed: int, report_dir: Path, journal: Path, extra: Sequence[str] = (), env: dict | None = None,
             selection: str = SELECTION) -> tuple[int, list[dict]]:
    """Run the gate with ``seed``; return its exit status and its check results (``checks.json``)."""
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-q", "--seed", str(seed),
               "--report-dir", str(report_dir), "--journal", str(journal), "--resume", "-k", selection, *extra]
    done = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the gate with seed {seed} ended with exit status {done.returncode}:\n"
                           f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    checks = json.loads((report_dir / "checks.json").read_text(encoding="utf-8"))["results"]
    return done.returncode, checks


def calibrate(seeds: int, out: Path, extra: Sequence[str] = (), plant: str | None = None,
              plant_rate: float = 0.05) -> dict:
    """Run the gate under ``seeds`` seeds (and with a planted regression); return the tallies."""
    out = Path(out)
    per_check: dict[str, Counter] = defaultdict(Counter)
    red, caught = [], []
    for seed in range(seeds):
        code, checks = run_gate(seed, out / f"seed{seed}", out / "journal", extra)
        red.append(code != 0)
        for r in checks:
            key = f"{r['family']}/{r['dataset']} {r['check']}"
            outcome = r["decision"]
            if r.get("known"):
                outcome = "xpass" if r["decision"] == "pass" else "expected"
            per_check[key][outcome] += 1
        if plant:
            baseline = out / f"seed{seed}" / "predictions.jsonl.gz"
            env = {"LAYA_PLANTED_FAMILY": plant, "LAYA_PLANTED_RATE": str(plant_rate), "LAYA_PLANTED_SEED": str(seed)}
            run_gate(seed, out / f"planted{seed}", out / "journal-planted",
                     [*extra, "--scorer", PLANTED_SCORER, "--baseline", str(baseline)], env)
            caught.append(planted_outcome(out / f"planted{seed}", plant))
    nulls = [null_regression(out / f"seed{seed}", out / f"seed{seed - 1}", seed, thresholds_of(extra))
             for seed in range(1, seeds)]
    compares = [compare_call(out / f"seed{seed - 1}", out / f"seed{seed}") for seed in range(1, seeds)]
    result = {
        "seeds": seeds,
        "false_alarm_rate": sum(red) / seeds,
        "red_seeds": [s for s, r in enumerate(red) if r],
        "checks": {k: dict(v) for k, v in sorted(per_check.items())},
    }
    if nulls:
        result["null_regression"] = {"comparisons": len(nulls), "red": sum(bool(n["failed"]) for n in nulls),
                                     "false_alarm_rate": sum(bool(n["failed"]) for n in nulls) / len(nulls),
                                     "per_comparison": nulls}
        result["null_compare"] = {"comparisons": len(compares), "red": sum(c["red"] for c in compares),
                                  "false_alarm_rate": sum(c["red"] for c in compares) / len(compares),
                                  "per_comparison": compares}
    if plant:
        result["planted"] = {"family": plant, "rate": plant_rate, "caught": sum(c["caught"] for c in caught),
                             "power": sum(c["caught"] for c in caught) / seeds,
                             "missed_seeds": [s for s, c in enumerate(caught) if not c["caught"]],
                             "detected": sum(c["detected"] for c in caught),
                             "detection_power": sum(c["detected"] for c in caught) / seeds,
                             "per_seed": caught}
        calls = [compare_call(out / f"seed{seed}", out / f"planted{seed}", plant) for seed in range(seeds)]
        result["planted"]["compare"] = {"called": sum(c["called"] for c in calls),
                                        "power": sum(c["called"] for c in calls) / seeds, "per_seed": calls}
    return result


def compare_call(old_dir: Path, new_dir: Path, family: str | None = None) -> dict:
    """``compare``'s judgement of two report folders of the same model and rows (``report.compare.compare``), the
    earlier given the later's seed and data fingerprint (under ``--rows-per-set`` a seed samples other rows: the pair
    is judged on the rows both scored, as ``--baseline`` pairs them), and a planted run's scorer taken for new weights
    (``scoring.planted``'s mark left out of its model identity), as the only differences between them; ``red`` its exit status 1, ``called``
    whether it named a regression of ``family`` (a failed regression check of it, or one of its checks now failing)."""
    from dataclasses import replace

    from laya_robustness.report.compare import compare, read_report

    old, new = read_report(old_dir), read_report(new_dir)
    same = {key: new.summary["meta"].get(key) for key in ("seed", "data_fingerprint")}
    summary = {**old.summary, "meta": {**old.summary["meta"], **same}}
    model = {k: v for k, v in (new.summary["meta"].get("model") or {}).items() if k != "planted"}
    new_summary = {**new.summary, "meta": {**new.summary["meta"], "model": model}}  # the plant stands for new weights
    comparison = compare(replace(old, summary=summary), replace(new, summary=new_summary))
    if comparison.not_comparable:
        raise RuntimeError(f"compare refused {old_dir} against {new_dir}: {comparison.not_comparable}")
    named = sorted({f"{r.family} {r.check}" for r in comparison.regressed}
                   | {f"{check}: {was} -> {now}" for check, was, now in comparison.now_failing})
    called = family is not None and any(n.startswith((f"{family} ", f"{family}/")) for n in named)
    return {"old": str(old_dir), "new": str(new_dir), "status": comparison.status, "red": comparison.status == 1,
            "regressions": named, "called": called}


def planted_outcome(report_dir: Path, family: str) -> dict:
    """One planted run against its baseline: the family's accuracy loss (baseline - now, pooled over its
    sets) with its paired 95% interval, its flip-rate rise with its interval (a meaning-preserving family),
    the McNemar counts and p, and whether the gate caught it (a regression check of the family failed)
    and whether McNemar detected it (p < alpha / m with b > c, m the pair's paired headlines: ``gate.baseline_limits``)."""
    from laya_robustness.gate.baseline_limits import gate_from, regression_level

    report_dir = Path(report_dir)
    summary = json.loads((report_dir / "summary.json").read_text(encoding="utf-8"))
    checks = json.loads((report_dir / "checks.json").read_text(encoding="utf-8"))
    cell = summary["baseline"][family]["all"]
    mcnemar = cell["mcnemar_acc"]
    alpha_each = regression_level(gate_from(checks["meta"], f"{report_dir}/checks.json"), summary["baseline"])
    low, high = cell["acc_diff_ci"]
    failed = sorted(r["check"] for r in checks["results"] if r["family"] == family
                    and r["check"] in REGRESSION_CHECKS and r["decision"] == "fail")
    return {"loss": -cell["acc_diff"], "loss_ci": [-high, -low], "flip_rise": cell.get("flip_diff"),
            "flip_rise_ci": cell.get("flip_diff_ci"), "b": mcnemar["b"], "c": mcnemar["c"],
            "p": mcnemar["p"], "alpha_each": alpha_each, "failed_checks": failed, "caught": bool(failed),
            "detected": mcnemar["p"] < alpha_each and mcnemar["b"] > mcnemar["c"]}


def thresholds_of(extra: Sequence[str]) -> Path:
    """The limits file the gate runs read: ``--thresholds`` among the extra options, else thresholds.toml."""
    args = list(extra)
    for i, arg in enumerate(args):
        if arg == "--thresholds" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--thresholds="):
            return Path(arg.split("=", 1)[1])
    return Path("thresholds.toml")


def null_regression(now_dir: Path, before_dir: Path, seed: int, thresholds: Path) -> dict:
    """The regression checks of one run against another run of the same model (see the module doc), judged as
    ``--baseline``, ``compare`` and ``trend`` judge them (``gate.baseline_limits``: every family's "all" cell at
    alpha / m, m the paired headlines of the pair): their false alarms are those of every path."""
    from laya_robustness.families import compares_flips
    from laya_robustness.gate.run_limits import regression_limits
    from laya_robustness.gate.baseline_limits import (change_call, regression_headlines, regression_level,
                                                 regression_results)
    from laya_robustness.metrics.baseline import ALL, baseline_block
    from laya_robustness.predictions import read_predictions
    from laya_robustness.report import load_limits

    now = read_predictions(Path(now_dir) / "predictions.jsonl.gz")
    before = read_predictions(Path(before_dir) / "predictions.jsonl.gz")
    flip_families = [f for f in sorted({r["family"] for r in now}) if compares_flips(f)]
    block = baseline_block(now, before, flip_families=flip_families, seed=seed)
    summary = json.loads((Path(now_dir) / "summary.json").read_text(encoding="utf-8"))
    gate = load_limits(summary, thresholds, None).gate
    level = regression_level(gate, block)
    cells = {family: (cell[ALL], regression_limits(gate, family, cell[ALL])) for family, cell in block.items()}
    results = [r for family, (cell, limits) in sorted(cells.items())
               for r in regression_results(family, cell, limits, level)]
    calls = [(family, check, call) for family, (cell, limits) in sorted(cells.items()) for check in limits
             if (call := change_call(cell, check, limits[check], level)) is not None]
    worst = min(calls, key=lambda c: c[2].p_worse, default=None)
    return {"seed": seed, "against_seed": seed - 1, "m": regression_headlines(gate, block), "level": level,
            "checks": len(results),
            "failed": [{"family": r.family, "check": r.check, "value": r.value} for r in results if not r.passed],
            "worst": {"family": worst[0], "check": worst[1], "value": worst[2].diff,
                      "p_worse": round(worst[2].p_worse, 4)} if worst else None}


def format_calibration(result: dict) -> str:
    """The checks that were not always the same across seeds, then the false-alarm rate and the power."""
    lines = [f"{'check':60s}  fail  undecided  pass  expected  xpass"]
    for key, counts in result["checks"].items():
        if len(counts) > 1 or counts.get("fail") or counts.get("xpass"):
            lines.append(f"{key:60s}  {counts.get('fail', 0):4d}  {counts.get('undecided', 0):9d}  "
                         f"{counts.get('pass', 0):4d}  {counts.get('expected', 0):8d}  {counts.get('xpass', 0):5d}")
    lines.append(f"gate red with the model unchanged: {len(result['red_seeds'])} of {result['seeds']} seeds "
                 f"(false-alarm rate {result['false_alarm_rate']:.3f}; red seeds: {result['red_seeds']})")
    if "null_regression" in result:
        n = result["null_regression"]
        lines.append(f"regression checks against the previous seed's predictions (the same model), as --baseline, "
                     f"compare and trend judge them: red in {n['red']} of {n['comparisons']} comparisons (false-alarm "
                     f"rate {n['false_alarm_rate']:.3f})")
    if "null_compare" in result:
        n = result["null_compare"]
        lines.append(f"compare on the same pairs (its regressions and the checks now failing): exit 1 in {n['red']} of "
                     f"{n['comparisons']} comparisons (false-alarm rate {n['false_alarm_rate']:.3f})")
    if "planted" in result:
        p = result["planted"]
        lines.append(f"planted regression ({p['rate']:.0%} of {p['family']}'s answers moved): caught in {p['caught']} "
                     f"of {result['seeds']} seeds (power {p['power']:.2f}; missed: {p['missed_seeds']})")
        if "compare" in p:
            lines.append(f"  compare of each seed's run against its planted run named {p['family']}'s regression in "
                         f"{p['compare']['called']} of {result['seeds']} seeds (power {p['compare']['power']:.2f})")
        if "detected" in p:
            losses = sorted(c["loss"] for c in p.get("per_seed", ()))
            median = f"; median loss {losses[len(losses) // 2]:.4f}" if losses else ""
            rises = sorted(c["flip_rise"] for c in p.get("per_seed", ()) if c.get("flip_rise") is not None)
            median += f", median flip-rate rise {rises[len(rises) // 2]:.4f}" if rises else ""
            lines.append(f"  the accuracy loss found real by McNemar (p < alpha / m): {p['detected']} of "
                         f"{result['seeds']} seeds (power {p['detection_power']:.2f}{median})")
    return "\n".join(lines)
