"""The planted regression moves exactly the drawn share of one family's answers, to the runner-up."""

import numpy as np

from laya_robustness.analysis.calibrate import format_calibration
from laya_robustness.recipes.fixture_rows import generate_rows
from laya_robustness.families import build_variants
from laya_robustness.scoring.planted import PlantedRegression

from helpers.fakes import OracleScorer


def test_a_share_of_one_family_moves_to_the_runner_up():
    rows = generate_rows("colour_choice", 80, seed=2)
    variants = build_variants("text", rows, 0) + build_variants("option_order", rows, 0)
    inner = OracleScorer("m")
    planted = PlantedRegression(inner, "text", 0.2)
    before, after = inner.score_batch(variants), planted.score_batch(variants)
    moved = [(r, a, b) for r, a, b in zip(variants, before, after) if not np.array_equal(a, b)]
    assert moved and all(r.family == "text" for r, _, _ in moved)
    share = len(moved) / sum(r.family == "text" for r in variants)
    assert 0.15 < share < 0.25
    for _, a, b in moved:
        top, second = np.argsort(-a, kind="stable")[:2]
        assert np.argmax(b) == second and sorted(a) == sorted(b)
    assert [np.array_equal(x, y) for x, y in zip(planted.score_predict(variants), after)] == [True] * len(after)
    assert planted.identity["planted"] == {"family": "text", "rate": 0.2, "seed": 0}


def test_the_calibration_table_names_what_varied():
    result = {"seeds": 10, "false_alarm_rate": 0.1, "red_seeds": [3],
              "checks": {"text/a max_flip": {"pass": 10}, "image_shuffle/b min_gap": {"pass": 7, "undecided": 2,
                                                                                     "fail": 1}},
              "planted": {"family": "text", "rate": 0.05, "caught": 9, "power": 0.9, "missed_seeds": [4]}}
    text = format_calibration(result)
    assert "image_shuffle/b min_gap" in text and "text/a max_flip" not in text
    assert "1 of 10 seeds" in text and "caught in 9 of 10 seeds (power 0.90; missed: [4])" in text


def test_a_planted_run_is_caught_when_past_the_limit_and_detected_when_mcnemar_finds_it(tmp_path):
    import json

    from laya_robustness.analysis.calibrate import planted_outcome

    summary = {"baseline": {"text": {"all": {"acc_diff": -0.0118, "acc_diff_ci": [-0.0167, -0.0067],
                                             "mcnemar_acc": {"b": 259, "c": 163, "n_pairs": 8640, "p": 3e-06}}}}}
    checks = {"meta": {"alpha": 0.05, "interval_checks": 150},
              "results": [{"family": "text", "dataset": "all", "check": "max_regression", "decision": "undecided"}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "checks.json").write_text(json.dumps(checks))
    out = planted_outcome(tmp_path, "text")
    assert (out["caught"], out["detected"]) == (False, True)
    # the level of the pair's paired headlines (text: accuracy and flips), not of the run's 150 limits
    assert out["loss"] == 0.0118 and out["loss_ci"] == [0.0067, 0.0167] and out["alpha_each"] == 0.05 / 2
    checks["results"][0]["decision"] = "fail"
    summary["baseline"]["text"]["all"]["mcnemar_acc"].update(b=100, c=120, p=0.2)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "checks.json").write_text(json.dumps(checks))
    assert planted_outcome(tmp_path, "text")["caught"] and not planted_outcome(tmp_path, "text")["detected"]
    result = {"seeds": 2, "false_alarm_rate": 0.0, "red_seeds": [], "checks": {},
              "planted": {"family": "text", "rate": 0.05, "caught": 0, "power": 0.0, "missed_seeds": [0, 1],
                          "detected": 2, "detection_power": 1.0, "per_seed": [out, out]}}
    assert "found real by McNemar (p < alpha / m): 2 of 2 seeds (power 1.00; median loss 0.0118)" in \
        format_calibration(result)


def _run_dir(path, records, interval_checks=100):
    """A gate run's files as null_regression reads them: predictions, summary (for its datasets), checks meta."""
    import json

    from laya_robustness.predictions import write_predictions
    from laya_robustness.summary import summarize

    path.mkdir()
    write_predictions(path / "predictions.jsonl.gz", records)
    (path / "summary.json").write_text(json.dumps(summarize(records, n_boot=50, n_boot_ece=50)))
    (path / "checks.json").write_text(json.dumps({"meta": {"alpha": 0.05, "interval_checks": interval_checks}}))
    return path


def test_the_regression_checks_against_another_run_of_the_same_model_and_against_a_worse_one(tmp_path):
    """null_regression: the same records -> no regression check fails; a run whose text answers moved
    away from the orig answers (and the label) -> both the accuracy and the flip checks fail."""
    from pathlib import Path

    from laya_robustness.analysis.calibrate import null_regression
    from laya_robustness.run.pipeline.chunks import prediction_record

    rows = generate_rows("colour_choice", 60, seed=4)
    variants = rows + build_variants("text", rows, 0)
    scorer = OracleScorer("m", margin=3.0, noise=0.5)
    temperatures = {"choice": 1.0, "noul": 1.0, "score": 1.0}
    records = [prediction_record(r, lg, temperatures) for r, lg in zip(variants, scorer.score_batch(variants))]
    before = _run_dir(tmp_path / "before", records)
    same = null_regression(_run_dir(tmp_path / "same", records), before, 1, Path("thresholds.toml"))
    assert same["failed"] == [] and same["checks"] == 3  # orig and text accuracy, text flips
    assert same["m"] == 3 and same["level"] == 0.05 / 3  # the pair's paired headlines, not the run's limits
    worse = [dict(r, argmax=(r["label"] + 1) % len(r["logits"])) if r["family"] == "text" and i % 3 == 0 else r
             for i, r in enumerate(records)]
    red = null_regression(_run_dir(tmp_path / "worse", worse), before, 1, Path("thresholds.toml"))
    assert {(f["family"], f["check"]) for f in red["failed"]} == {("text", "max_regression"),
                                                                  ("text", "max_flip_regression")}
    assert red["worst"]["family"] == "text" and red["worst"]["p_worse"] < 0.05 / 3
    result = {"seeds": 3, "false_alarm_rate": 0.0, "red_seeds": [], "checks": {},
              "null_regression": {"comparisons": 2, "red": 1, "false_alarm_rate": 0.5, "per_comparison": [same, red]}}
    assert "red in 1 of 2 comparisons (false-alarm rate 0.500)" in format_calibration(result)


def test_compares_own_call_on_runs_of_another_seed_and_on_a_worse_run(tmp_path):
    """compare_call: compare's own judgement (report.compare.compare) of two runs whose seeds differ: the same records
    -> exit 0 (not refused for the seed); a run whose text answers moved -> exit 1 naming text's regressions."""
    import json

    from laya_robustness.analysis.calibrate import compare_call
    from laya_robustness.run.pipeline.chunks import prediction_record

    rows = generate_rows("colour_choice", 60, seed=4)
    variants = rows + build_variants("text", rows, 0)
    scorer = OracleScorer("m", margin=3.0, noise=0.5)
    temperatures = {"choice": 1.0, "noul": 1.0, "score": 1.0}
    records = [prediction_record(r, lg, temperatures) for r, lg in zip(variants, scorer.score_batch(variants))]
    worse = [dict(r, argmax=(r["label"] + 1) % len(r["logits"])) if r["family"] == "text" and i % 3 == 0 else r
             for i, r in enumerate(records)]
    folders = {}
    for name, seed, recs in (("before", 0, records), ("same", 1, records), ("worse", 1, worse)):
        folder = _run_dir(tmp_path / name, recs)
        summary = json.loads((folder / "summary.json").read_text())
        summary["meta"]["seed"] = seed
        (folder / "summary.json").write_text(json.dumps(summary))
        (folder / "checks.json").write_text(json.dumps({"meta": {"alpha": 0.05, "interval_checks": 100},
                                                        "results": []}))
        folders[name] = folder
    same = compare_call(folders["before"], folders["same"], "text")
    assert same["status"] == 0 and not same["red"] and not same["called"] and same["regressions"] == []
    worse_call = compare_call(folders["before"], folders["worse"], "text")
    assert worse_call["status"] == 1 and worse_call["called"]
    assert worse_call["regressions"] == ["text max_flip_regression", "text max_regression"]
    assert not compare_call(folders["before"], folders["worse"], "orig")["called"]
