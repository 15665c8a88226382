"""The one judgement of a change between two runs (``metrics.regression.judge_change``) against an independent
reference: its exact interval inverts the same binomial test (they never disagree), a called regression always has
the test's p below the level, the tolerance and the direction are honoured, and the gate's ``--baseline`` checks
read it (``gate.baseline_limits``)."""

import itertools
import random

import pytest

from laya_robustness.gate.baseline_limits import change_call, regression_headlines, regression_level, regression_results
from laya_robustness.gate.limits_file import Gate
from laya_robustness.metrics.baseline import mcnemar_p
from laya_robustness.metrics.regression import EXACT_BELOW, binomial_tail, clopper_pearson, judge_change


def test_the_exact_interval_excludes_no_change_exactly_when_the_exact_test_rejects():
    for worse, better in itertools.product(range(EXACT_BELOW), repeat=2):
        if 0 < worse + better < EXACT_BELOW:
            for level in (0.05, 0.01, 0.05 / 12):
                call = judge_change("acc", diff=None, se=None, worse=worse, better=better, n_rows=200,
                                    tolerance=0.0, level=level)
                excludes = call.interval[0] > 0 or call.interval[1] < 0
                assert call.method == "exact McNemar"
                assert excludes == (mcnemar_p(worse, better) < level), (worse, better, level, call)
                assert call.regression == (worse > better and binomial_tail(worse, worse + better, 0.5) < level)


def test_a_called_regression_always_has_its_tests_p_below_the_level():
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randrange(40, 400)
        worse, better = rng.randrange(0, n // 4), rng.randrange(0, n // 4)
        diff, se = (better - worse) / n + rng.gauss(0, 0.01), rng.uniform(0.002, 0.05)
        level = 0.05 / rng.randrange(1, 40)
        for metric in ("acc", "flip"):
            call = judge_change(metric, diff=diff, se=se, worse=worse, better=better, n_rows=n, tolerance=0.0,
                                level=level)
            if call.regression:
                assert call.p_worse < level
            if call.beyond and not call.regression:
                assert call.p < level


def test_the_issues_cases_a_small_move_is_no_regression_at_the_family_wise_level():
    """``inject_text/colour_choice acc 0.574 -> 0.565, paired -0.008 [-0.017, -0.001], McNemar p=0.070``: the 95%
    interval excludes 0 but the test does not reject; at alpha / 160 neither does the judgement."""
    level = 0.05 / 160
    call = judge_change("acc", diff=-0.008, se=0.004, worse=14, better=6, n_rows=1200, tolerance=0.0, level=level)
    assert not call.regression and not call.beyond
    assert mcnemar_p(14, 6) > level
    big = judge_change("acc", diff=-0.07, se=0.012, worse=90, better=6, n_rows=1200, tolerance=0.0, level=level)
    assert big.regression and big.p_worse < level


def test_better_is_never_a_regression_and_a_tolerance_is_honoured():
    better = judge_change("acc", diff=+0.2, se=0.02, worse=2, better=60, n_rows=300, tolerance=0.0, level=0.01)
    assert better.beyond and not better.regression
    within = judge_change("acc", diff=-0.03, se=0.005, worse=40, better=5, n_rows=400, tolerance=0.05, level=0.01)
    assert not within.regression and within.beyond
    past = judge_change("acc", diff=-0.10, se=0.005, worse=60, better=5, n_rows=400, tolerance=0.05, level=0.01)
    assert past.regression
    flips = judge_change("flip", diff=+0.10, se=0.01, worse=50, better=4, n_rows=300, tolerance=0.0, level=0.01)
    assert flips.regression and flips.diff > 0


def test_clopper_pearson_matches_its_closed_forms():
    low, high = clopper_pearson(0, 10, 0.025)
    assert low == 0 and high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)
    low, high = clopper_pearson(10, 10, 0.025)
    assert high == 1 and low == pytest.approx(0.025 ** (1 / 10), abs=1e-9)


@pytest.mark.parametrize("bad", [{"level": 0}, {"level": 1}, {"n_rows": 0}, {"worse": -1}, {"worse": 300}])
def test_bad_arguments_are_named(bad):
    args = {"diff": 0.0, "se": 0.01, "worse": 1, "better": 1, "n_rows": 100, "tolerance": 0.0, "level": 0.05, **bad}
    with pytest.raises(ValueError, match="level in \\(0, 1\\)"):
        judge_change("acc", **args)


def test_an_unknown_headline_is_named():
    with pytest.raises(ValueError, match="metric must be one of \\['acc', 'flip'\\], got 'f1'"):
        judge_change("f1", diff=0.0, se=0.01, worse=1, better=1, n_rows=100, tolerance=0.0, level=0.05)


def test_the_gate_judges_each_family_at_alpha_over_the_pairs_paired_headlines():
    gate = Gate(alpha=0.05, max_regression=0.0, max_flip_regression=0.0)
    assert regression_headlines(gate, ["orig", "text", "image", "text"]) == 1 + 2 + 2  # text, image: flips too
    assert regression_level(gate, ["orig", "text"]) == pytest.approx(0.05 / 3)
    assert regression_level(Gate(alpha=0.05, correction="none"), ["orig", "text"]) == 0.05
    cell = {"acc_diff": -0.2, "acc_diff_se": 0.03, "mcnemar_acc": {"b": 40, "c": 4, "n_pairs": 200},
            "flip_diff": 0.01, "flip_diff_se": 0.02, "mcnemar_flip": {"b": 10, "c": 12, "n_pairs": 200}}
    results = regression_results("text", cell, {"max_regression": 0.0, "max_flip_regression": 0.0}, 0.05 / 3)
    assert [(r.check, r.passed, r.judge) for r in results] == [("max_regression", False, "paired"),
                                                               ("max_flip_regression", True, "paired")]
    assert "McNemar p=" in results[0].detail and "at level 0.0167" in results[0].detail
    assert change_call({"acc_diff": None}, "max_regression", 0.0, 0.05) is None


def test_compare_the_baseline_checks_trend_and_the_callbacks_stop_rule_call_the_same_regressions(tmp_path,
                                                                                                  monkeypatch):
    """One pair of runs (the embedded checkpoint, then it with a regression planted in 40% of the text family's
    answers, gated against the first's predictions): the regressions ``compare`` calls, those the gate's
    ``--baseline`` checks fail, those ``trend`` marks and those the callback's ``stop_on_fail="regression"`` stops on
    are one set, and it is not empty."""
    from pathlib import Path

    import laya_robustness
    from laya_robustness.report.compare import compare, read_report
    from laya_robustness.report.trend import judged_pairs, read_checkpoints
    from laya_robustness.stopping import REGRESSION_CHECKS, decide, failed_key

    root = Path(__file__).resolve().parents[2]
    gate = {"families": ["option_order", "text"], "rows_per_set": 12, "invariance": False, "limitations": "none",
            "root": root}
    laya_robustness.run_gate(report_dir=tmp_path / "checkpoint-1", **gate)
    monkeypatch.setenv("LAYA_PLANTED_FAMILY", "text")
    monkeypatch.setenv("LAYA_PLANTED_RATE", "0.4")
    planted = laya_robustness.run_gate(scorer="laya_robustness.scoring.planted:factory",
                                       baseline=str(tmp_path / "checkpoint-1" / "predictions.jsonl.gz"),
                                       report_dir=tmp_path / "checkpoint-2", **gate)
    by_baseline = {(f.family, f.check) for f in planted.failures if f.check in REGRESSION_CHECKS}
    by_compare = {(r.family, r.check) for r in
                  compare(read_report(tmp_path / "checkpoint-1"), read_report(tmp_path / "checkpoint-2")).regressed}
    (_, judged), = judged_pairs(read_checkpoints([tmp_path / "checkpoint-1", tmp_path / "checkpoint-2"]))
    by_trend = {(r.family, r.check) for r in judged.regressions}
    failed = [failed_key(f.family, f.dataset, f.check) for f in planted.failures]
    stops_on = {(key.split("/")[0], key.rsplit(" ", 1)[1]) for key in failed if key.rsplit(" ", 1)[1] in
                REGRESSION_CHECKS}
    assert by_baseline == by_compare == by_trend == stops_on
    assert ("text", "max_regression") in by_baseline and ("option_order", "max_regression") not in by_baseline
    assert decide("regression", failed, set())


def test_many_discordant_rows_are_judged_without_overflow():
    """A pair whose answers changed on thousands of rows (a new checkpoint on a large set): the worse-side p is the
    binomial tail to 1e-9 of the exact one, where the float terms of math.comb overflowed past ~1,030 rows."""
    from fractions import Fraction
    from math import comb

    from laya_robustness.metrics.regression import binomial_tail, judge_change

    for worse, better in ((560, 441), (1400, 1200), (3000, 2900)):
        n = worse + better
        exact = float(Fraction(sum(comb(n, i) for i in range(worse, n + 1)), 2 ** n))
        assert abs(binomial_tail(worse, n, 0.5) - exact) <= 1e-9 * max(exact, 1e-300)
        call = judge_change("acc", diff=-(worse - better) / 20000, se=0.002, worse=worse, better=better,
                            n_rows=20000, tolerance=0.0, level=0.05 / 160)
        assert call.p_worse == binomial_tail(worse, n, 0.5)
