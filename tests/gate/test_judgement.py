"""Limits judged on their interval: z-tests with the bootstrap SE, alpha / m per check, borderline known limitations."""

import math
from statistics import NormalDist

import pytest

from laya_robustness.gate.judgement import evaluate_cell, judge_on_interval, Judgement
from laya_robustness.metrics.baseline import baseline_block, mcnemar_p

FLIPS = ("text",)  # the meaning-preserving families of these records
from laya_robustness.gate.limits_file import Gate, ThresholdsError, load_thresholds

from helpers.records import record

Z = NormalDist().inv_cdf


def judged(cell, limits, alpha_each=0.001):
    return evaluate_cell("text", "vsr", cell, limits, Judgement(lambda check: "interval", alpha_each))


@pytest.mark.parametrize("flip, decision", [(0.10 + 3.2 * 0.02, "fail"), (0.10 + 3.0 * 0.02, "undecided"),
                                            (0.10 - 3.2 * 0.02, "pass"), (0.11, "undecided")])
def test_a_flip_limit_fails_only_beyond_the_critical_distance(flip, decision):
    (r,) = judged({"flip": flip, "flip_se": 0.02, "n_groups": 240}, {"max_flip": 0.10})
    assert Z(1 - 0.001) == pytest.approx(3.0902, abs=1e-4)
    assert r.decision == decision and r.passed == (decision != "fail") and r.judge == "interval"
    assert r.z == pytest.approx((flip - 0.10) / 0.02)


def test_a_lower_limit_and_the_drop_rules():
    (acc,) = judged({"acc": 0.40, "acc_se": 0.02, "n_groups": 100}, {"min_acc": 0.5})
    assert acc.decision == "fail" and acc.z == pytest.approx(5.0)
    (drop,) = judged({"delta": -0.06, "delta_se": 0.005, "delta_ci": [-0.07, -0.05], "n_groups": 100},
                     {"max_drop": 0.05})
    assert drop.decision == "undecided" and drop.z == pytest.approx(2.0)  # 0.01 past -0.05 is 2 SE
    (gap,) = judged({"delta": -0.30, "delta_se": 0.02, "delta_ci": [-0.34, -0.26], "n_groups": 100},
                    {"min_gap": 0.15})
    assert gap.decision == "pass" and gap.value == pytest.approx(0.30)


def test_without_a_standard_error_the_point_rule_stands():
    (r,) = judged({"flip": 0.2, "n_groups": 10}, {"max_flip": 0.1})
    assert r.decision == "fail" and r.se is None


def test_the_standard_error_falls_back_to_the_interval_width():
    (r,) = judged({"acc": 0.5, "acc_ci": [0.4, 0.6], "n_groups": 50}, {"min_acc": 0.45})
    assert r.se == pytest.approx(0.2 / 3.919928, rel=1e-5)


def test_rows_needed_to_tell_a_five_point_change():
    (r,) = judged({"flip": 0.08, "flip_se": 0.03, "n_groups": 100}, {"max_flip": 0.10})
    expected = math.ceil(100 * ((Z(1 - 0.001) + Z(0.8)) * 0.03 / 0.05) ** 2)
    assert r.rows_needed == expected and expected > 100  # this set is too small to decide


def test_point_judgement_is_the_old_rule():
    (r,) = evaluate_cell("text", "vsr", {"flip": 0.11, "flip_se": 0.02}, {"max_flip": 0.1})
    assert r.decision == "fail" and r.judge == "point"
    assert judge_on_interval(r, {"flip_se": 0.02}, 0.001).decision == "undecided"


GATE = """version = 1
[gate]
alpha = 0.01
judge = "point"
correction = "none"
max_regression = 0.03
[families.text]
max_flip = {limit = 0.1, judge = "interval"}
max_drop = 0.05
[families.text.datasets.vsr]
max_drop = {limit = 0.2, judge = "interval"}
[families.orig]
max_ece = 0.2
"""


def test_the_gate_table_and_per_limit_judges(tmp_path):
    path = tmp_path / "limits.toml"
    path.write_text(GATE)
    t = load_thresholds(path, families=["text", "orig"], datasets=["vsr", "ai2d"], conditions=[])
    assert t.gate == Gate(alpha=0.01, judge="point", correction="none", max_regression=0.03)
    assert t.gate.alpha_each(50) == 0.01 and Gate().alpha_each(50) == 0.05 / 50
    assert t.limits_for("text", "vsr") == {"max_flip": 0.1, "max_drop": 0.2}
    assert t.judge_for("text", "ai2d", "max_flip") == "interval" and t.judge_for("text", "ai2d", "max_drop") == "point"
    assert t.judge_for("text", "vsr", "max_drop") == "interval"
    default = tmp_path / "default.toml"
    default.write_text("version = 1\n[families.orig]\nmax_ece = 0.2\nmin_acc = 0.5\n")
    t = load_thresholds(default, families=["orig"], datasets=["vsr"], conditions=[])
    assert t.judge_for("orig", "vsr", "min_acc") == "interval" and t.judge_for("orig", "vsr", "max_ece") == "point"


@pytest.mark.parametrize("text, key", [
    ("[gate]\nalpha = 0\n", "gate.alpha"), ("[gate]\njudge = 'mean'\n", "gate.judge"),
    ("[gate]\nalpah = 0.1\n", "gate.alpah"),
    ("[families.text]\nmax_flip = {limit = 0.1, judge = 'mean'}\n", "families.text.max_flip.judge"),
    ("[families.text]\nmax_flip = {judge = 'point'}\n", "families.text.max_flip.limit"),
])
def test_bad_gate_settings_are_errors(tmp_path, text, key):
    path = tmp_path / "limits.toml"
    path.write_text("version = 1\n" + text)
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(path, families=["text"], datasets=[], conditions=[])
    assert info.value.key == key


def test_mcnemar_against_a_plain_binomial():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 5) == 1.0
    assert mcnemar_p(0, 6) == pytest.approx(2 * 0.5 ** 6)
    assert mcnemar_p(2, 8) == pytest.approx(2 * sum(math.comb(10, i) for i in range(3)) / 2 ** 10)


def _rec(group, family, argmax, label=1, dataset="d", cluster=None):
    return record(group, family, "orig" if family == "orig" else "v", cluster=cluster or group, dataset=dataset,
                  primitive="noul", label=label, logits=[0.0, 1.0], probs=[0.5, 0.5], argmax=argmax)


def test_baseline_paired_difference_and_mcnemar_by_hand():
    before = [_rec(f"g{i}", "orig", 1) for i in range(4)] + [_rec(f"g{i}", "text", 1) for i in range(4)]
    now = [_rec(f"g{i}", "orig", 1) for i in range(4)] + [_rec(f"g{i}", "text", 0 if i < 2 else 1) for i in range(4)]
    block = baseline_block(now, before, flip_families=FLIPS, n_boot=200)
    cell = block["text"]["d"]
    assert (cell["n_matched"], cell["acc"], cell["acc_baseline"], cell["acc_diff"]) == (4, 0.5, 1.0, -0.5)
    assert cell["mcnemar_acc"] == {"n_pairs": 4, "b": 2, "c": 0, "p": 0.5}
    assert cell["mcnemar_flip"]["c"] == 2  # two answers now differ from their orig, none did before
    assert block["text"]["all"]["acc_diff"] == -0.5 and block["orig"]["d"]["acc_diff"] == 0.0
    same = baseline_block(before, before, flip_families=FLIPS, n_boot=200)["text"]["all"]
    assert same["acc_diff"] == 0.0 and same["acc_diff_se"] == 0.0 and same["mcnemar_acc"]["p"] == 1.0


def test_flip_regression_by_hand_and_only_where_the_answer_should_not_change():
    """flip_diff = mean over groups of (flip now - flip before); a family of another kind has none."""
    before = ([_rec(f"g{i}", "orig", 1) for i in range(4)]
              + [_rec("g0", "text", 1), _rec("g1", "text", 0), _rec("g2", "text", 1), _rec("g3", "text", 1)]
              + [_rec(f"g{i}", "image_shuffle", 1) for i in range(4)])
    # g0 flips now and not before; g1 flipped before and not now; g2 flips now (its orig answer moved); g3 never
    now = ([_rec("g0", "orig", 1), _rec("g1", "orig", 1), _rec("g2", "orig", 0), _rec("g3", "orig", 1)]
           + [_rec("g0", "text", 0), _rec("g1", "text", 1), _rec("g2", "text", 1), _rec("g3", "text", 1)]
           + [_rec(f"g{i}", "image_shuffle", 0) for i in range(4)])
    block = baseline_block(now, before, flip_families=FLIPS, n_boot=200)
    cell = block["text"]["all"]
    # per group, flip now - flip before: g0 1 - 0, g1 0 - 1, g2 1 - 0, g3 0 - 0 -> (1 - 1 + 1 + 0) / 4
    assert cell["flip_diff"] == 0.25 and cell["n_flip_groups"] == 4
    assert cell["mcnemar_flip"] == {"n_pairs": 4, "b": 1, "c": 2, "p": 1.0}
    assert cell["flip_diff_ci"][0] <= 0.25 <= cell["flip_diff_ci"][1] and cell["flip_diff_se"] > 0
    assert "flip_diff" not in block["image_shuffle"]["all"]  # a control: its answers should move
    (result,) = evaluate_cell("text", "all", cell, {"max_flip_regression": 0.0})
    assert result.value == 0.25 and result.passed == (cell["flip_diff_ci"][0] <= 0)
    (result,) = evaluate_cell("text", "all", {**cell, "flip_diff_ci": [0.1, 0.4]}, {"max_flip_regression": 0.0})
    assert not result.passed
    (result,) = evaluate_cell("text", "all", {**cell, "flip_diff_ci": [-0.1, 0.9]}, {"max_flip_regression": 0.0})
    assert result.passed


def test_a_real_flip_rise_fails_on_its_interval_and_no_change_passes():
    cell = {"flip_diff": 0.027, "flip_diff_se": 0.0024, "flip_diff_ci": [0.022, 0.032], "n_flip_groups": 1200}
    judge = Judgement(lambda check: "interval", 0.05 / 172)
    (result,) = evaluate_cell("text", "all", cell, {"max_flip_regression": 0.0}, judge)
    assert result.decision == "fail" and result.z > 3.4
    (result,) = evaluate_cell("text", "all", {**cell, "flip_diff": 0.0, "flip_diff_se": 0.0, "flip_diff_ci": [0, 0]},
                              {"max_flip_regression": 0.0}, judge)
    assert result.passed
