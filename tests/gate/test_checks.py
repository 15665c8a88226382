"""evaluate_cell / evaluate_invariance at their boundaries, failure_message, and worst_groups on hand-made records."""

import math

import pytest

from laya_robustness.gate.explain import failure_message, worst_groups
from laya_robustness.gate.judgement import evaluate_cell, evaluate_invariance
from laya_robustness.gate.results import CheckResult
from laya_robustness.summary import summarize
from laya_robustness.gate.catalogue import CHECKS

from helpers.records import record

UP = lambda x: math.nextafter(x, math.inf)  # noqa: E731  the next float above x
DOWN = lambda x: math.nextafter(x, -math.inf)  # noqa: E731  the next float below x


def cell(**changes):
    base = {
        "acc": 0.7, "acc_ci": [0.6, 0.8], "delta": -0.02, "delta_ci": [-0.06, 0.01], "flip": 0.1,
        "ece": 0.2, "ece_ci": [0.15, 0.25], "asr": 0.3, "chance": 0.25, "av": 0.05, "v": 0.1, "e_inv": 0.05, "pr_min": 0.9, "acc_diff": -0.01, "acc_diff_ci": [-0.03, 0.01],
        "flip_diff": 0.01, "flip_diff_ci": [-0.01, 0.03], "n_groups": 50,
    }
    base.update(changes)
    return base


def one(check, limit, **changes):
    results = evaluate_cell("text", "vsr", cell(**changes), {check: limit})
    assert len(results) == 1 and results[0].check == check
    return results[0]


# ------------------------------------------------------------------------------------------ evaluate_cell


def test_max_flip_boundary():
    at = one("max_flip", 0.1, flip=0.1)
    assert at.passed and (at.value, at.limit) == (0.1, 0.1)
    above = one("max_flip", 0.1, flip=UP(0.1))
    assert not above.passed and "> max_flip 0.1" in above.detail
    assert one("max_flip", 0.1, flip=0.0).passed


def test_max_flip_carries_an_interval_only_when_the_cell_has_one():
    assert one("max_flip", 0.1).interval is None
    assert one("max_flip", 0.1, flip_ci=[0.05, 0.15]).interval == (0.05, 0.15)


def test_max_drop_uses_the_interval_not_the_point():
    # point far below -max_drop, but the interval reaches above it: passes
    wide = one("max_drop", 0.05, delta=-0.2, delta_ci=[-0.4, -0.01])
    assert wide.passed and wide.value == -0.2 and wide.interval == (-0.4, -0.01)
    # point well inside the limit, but the whole interval lies below -max_drop: fails
    below = one("max_drop", 0.05, delta=-0.01, delta_ci=[-0.3, -0.06])
    assert not below.passed and "is below -max_drop = -0.05" in below.detail


def test_max_drop_boundary():
    assert one("max_drop", 0.05, delta=-0.1, delta_ci=[-0.2, -0.05]).passed  # upper end == -max_drop
    assert not one("max_drop", 0.05, delta=-0.1, delta_ci=[-0.2, DOWN(-0.05)]).passed
    assert one("max_drop", 0.0, delta=0.0, delta_ci=[-0.1, 0.0]).passed
    assert not one("max_drop", 0.0, delta=-0.1, delta_ci=[-0.2, DOWN(0.0)]).passed


def test_min_gap_boundary_and_interval():
    ok = one("min_gap", 0.15, delta=-0.15, delta_ci=[-0.25, -0.05])
    assert ok.passed and ok.value == 0.15 and ok.interval == (0.05, 0.25)  # gap = -delta, interval flipped
    small = one("min_gap", 0.15, delta=-DOWN(0.15), delta_ci=[-0.25, -0.05])
    assert not small.passed and "< min_gap 0.15" in small.detail
    # a large gap whose interval touches 0 fails: the lower end must be > 0
    touching = one("min_gap", 0.15, delta=-0.3, delta_ci=[-0.6, 0.0])
    assert not touching.passed and touching.interval == (-0.0, 0.6)
    assert "does not exclude 0" in touching.detail and "< min_gap" not in touching.detail
    barely = one("min_gap", 0.15, delta=-0.3, delta_ci=[-0.6, DOWN(0.0)])
    assert barely.passed


def test_min_gap_both_conditions_fail_in_the_detail():
    r = one("min_gap", 0.15, delta=-0.05, delta_ci=[-0.1, 0.02])
    assert not r.passed
    assert "gap 0.05 < min_gap 0.15" in r.detail and "does not exclude 0" in r.detail


def test_min_acc_boundary():
    at = one("min_acc", 0.5, acc=0.5)
    assert at.passed and at.interval == (0.6, 0.8)  # acc_ci of the cell
    assert not one("min_acc", 0.5, acc=DOWN(0.5)).passed


def test_max_ece_boundary():
    at = one("max_ece", 0.2, ece=0.2)
    assert at.passed and at.interval == (0.15, 0.25)
    assert not one("max_ece", 0.2, ece=UP(0.2)).passed


def test_max_asr_boundary():
    assert one("max_asr", 0.3, asr=0.3).passed
    assert not one("max_asr", 0.3, asr=UP(0.3)).passed


@pytest.mark.parametrize(
    "check, metric",
    [("max_flip", "flip"), ("max_drop", "delta_ci"), ("max_drop", "delta"), ("min_gap", "delta"),
     ("min_gap", "delta_ci"), ("min_acc", "acc"), ("max_ece", "ece"), ("max_asr", "asr"),
     ("min_acc_over_chance", "acc"), ("min_acc_over_chance", "chance")],
)
def test_missing_metric_raises_naming_it(check, metric):
    c = cell()
    del c[metric]
    with pytest.raises(KeyError, match=f"{check} needs metric '{metric}'.*lacks"):
        evaluate_cell("text", "vsr", c, {check: 0.5})
    with pytest.raises(KeyError, match=f"'{metric}', which is undefined"):
        evaluate_cell("text", "vsr", cell(**{metric: None}), {check: 0.5})


@pytest.mark.parametrize(
    "check, changes",
    [("max_flip", {"flip": math.nan}), ("max_drop", {"delta_ci": [math.nan, math.nan]}),
     ("min_gap", {"delta": math.nan}), ("min_gap", {"delta_ci": [math.nan, math.nan]}),
     ("min_acc", {"acc": math.nan}), ("max_ece", {"ece": math.nan}), ("max_asr", {"asr": math.nan})],
)
def test_nan_never_passes(check, changes):
    assert not one(check, 0.5, **changes).passed


def test_min_acc_over_chance_is_the_margin_above_chance():
    ok = one("min_acc_over_chance", 0.25, acc=0.5, chance=0.25)  # exactly at the limit passes
    assert ok.passed and ok.value == pytest.approx(0.25) and ok.interval == pytest.approx((0.35, 0.55))
    assert "accuracy 0.5 - chance 0.25 = 0.25 >= min_acc_over_chance 0.25" in ok.detail
    yes_no = one("min_acc_over_chance", 0.25, acc=0.7, chance=0.5)  # 0.7 clears 0.5 on four options, not here
    assert not yes_no.passed and yes_no.value == pytest.approx(0.2)
    assert not one("min_acc_over_chance", 0.25, chance=math.nan).passed


def test_every_check_in_order_and_nothing_else():
    limits = {c: 0.5 for c in reversed(CHECKS)}
    limits["min_gap"] = -1.0
    results = evaluate_cell("text", "vsr", cell(), limits)
    assert [r.check for r in results] == list(CHECKS)
    assert all(isinstance(r, CheckResult) and (r.family, r.dataset) == ("text", "vsr") for r in results)
    assert evaluate_cell("text", "vsr", cell(), {}) == []


def test_malformed_inputs_raise():
    with pytest.raises(ValueError, match="did you mean 'max_flip'"):
        evaluate_cell("text", "vsr", cell(), {"max_flp": 0.1})
    with pytest.raises(TypeError, match="delta_ci"):
        evaluate_cell("text", "vsr", cell(delta_ci=[0.1]), {"max_drop": 0.1})
    with pytest.raises(TypeError, match="'flip' must be a number"):
        evaluate_cell("text", "vsr", cell(flip="0.1"), {"max_flip": 0.1})


# ------------------------------------------------------------------------------------- evaluate_invariance

STATS = {"max_abs_dp": 1e-5, "max_abs_dlogit": 1e-4, "flips": 0, "bitwise": False}


def test_invariance_boundaries_are_strict_for_deltas():
    limits = {"max_abs_dp": 1e-5, "max_abs_dlogit": 1e-4, "max_flips": 0}
    at = evaluate_invariance("batched", STATS, limits)
    assert [(r.check, r.passed) for r in at] == [("max_abs_dp", False), ("max_abs_dlogit", False), ("max_flips", True)]
    assert all((r.family, r.dataset) == ("invariance", "batched") for r in at)
    below = dict(STATS, max_abs_dp=DOWN(1e-5), max_abs_dlogit=DOWN(1e-4), flips=1)
    got = evaluate_invariance("batched", below, dict(limits, max_flips=1))
    assert [r.passed for r in got] == [True, True, True]
    over = evaluate_invariance("batched", dict(STATS, flips=2), {"max_flips": 1})
    assert len(over) == 1 and not over[0].passed and over[0].value == 2.0


def test_invariance_bitwise():
    passed = evaluate_invariance("repeat", dict(STATS, bitwise=True), {"bitwise": True})
    assert len(passed) == 1 and passed[0].passed and passed[0].value == 1.0
    failed = evaluate_invariance("repeat", STATS, {"bitwise": True})
    assert len(failed) == 1 and not failed[0].passed and failed[0].value == 0.0
    assert evaluate_invariance("repeat", STATS, {"bitwise": False}) == []  # not required: nothing to check


def test_invariance_missing_or_bad_stats_raise():
    with pytest.raises(KeyError, match="'flips'"):
        evaluate_invariance("batched", {"max_abs_dp": 0.0}, {"max_flips": 0})
    with pytest.raises(KeyError, match="'max_abs_dlogit'"):
        evaluate_invariance("batched", {"max_abs_dp": 0.0}, {"max_abs_dlogit": 1e-4})
    with pytest.raises(TypeError, match="bitwise"):
        evaluate_invariance("repeat", dict(STATS, bitwise=1), {"bitwise": True})
    with pytest.raises(ValueError, match="did you mean 'max_flips'"):
        evaluate_invariance("batched", STATS, {"max_flip": 0})


# ---------------------------------------------------------------------------------------- failure_message


def test_failure_message_names_everything():
    r = one("max_drop", 0.05, delta=-0.12, delta_ci=[-0.2, -0.07])
    msg = failure_message(r, ["g4: acc 1.00 -> 0.00 (loss 1.00)", "g1: acc 1.00 -> 0.33 (loss 0.67)"])
    lines = msg.splitlines()
    assert lines[0] == "text/vsr: max_drop FAILED"
    for part in ("family:   text", "dataset:  vsr", "paired delta vs orig = -0.12", "max_drop = 0.05",
                 "upper end of the delta interval >= -0.05", "95% [-0.2, -0.07]", "worst (2):"):
        assert part in msg, part
    assert lines[-2:] == ["    g4: acc 1.00 -> 0.00 (loss 1.00)", "    g1: acc 1.00 -> 0.33 (loss 0.67)"]


def test_failure_message_without_interval_or_worst():
    r = evaluate_invariance("batched", STATS, {"max_abs_dp": 1e-5})[0]
    msg = failure_message(r, [])
    assert msg.startswith("invariance/batched: max_abs_dp FAILED")
    assert "interval: none" in msg and "(none given)" in msg and "max |delta p| = 1e-05" in msg


# ------------------------------------------------------------------------------------------- worst_groups

ORIG_ROWS = {"g1": (1, 1), "g2": (0, 0), "g3": (2, 1), "g4": (1, 1), "g5": (0, 0)}  # group: (label, argmax)
ORDER = {  # group: {variant: argmax}; labels as in ORIG_ROWS
    "g1": {"shift1": 0, "shift2": 1, "reverse": 2},  # 2/3 flipped, acc 1/3 (loss 2/3)
    "g2": {"shift1": 0, "shift2": 0, "reverse": 0},  # no flip, acc 1
    "g3": {"shift1": 2, "shift2": 2, "reverse": 1},  # 2/3 flipped, acc 2/3 (a gain: orig was wrong)
    "g4": {"shift1": 0, "shift2": 0, "reverse": 0},  # 3/3 flipped, acc 0 (loss 1)
    "g5": {"shift1": 1, "shift2": 0, "reverse": 0},  # 1/3 flipped, acc 2/3 (loss 1/3)
}
CONF = {("g1", "reverse"): 0.9, ("g4", "shift1"): 0.9, ("g3", "reverse"): 0.8, ("g5", "shift1"): 0.7,
        ("g2", "shift1"): 0.99}  # the rest 0.5; g2/shift1 is right, so never among the worst
SHUFFLE = {"g1": {"shuffled": 1}, "g2": {"shuffled": 1}, "g3": {"shuffled": 2}, "g4": {"shuffled": 0},
           "g5": {"shuffled": 0, "shuffled2": 1}}  # right: g1, g3 (acc 1), g5 (acc 1/2); wrong: g2, g4


def rec(group, family, variant, argmax, dataset="d", conf=0.5, label=None):
    probs = [round((1 - conf) / 2, 6)] * 3
    probs[argmax] = conf
    return record(group, family, variant, cluster=f"{dataset}/c-{group}", dataset=dataset, primitive="choice",
                  label=ORIG_ROWS[group][0] if label is None else label, logits=[0.0, 0.0, 0.0], probs=probs,
                  argmax=argmax)


def records(dataset="d"):
    out = [rec(g, "orig", "orig", am, dataset, conf=0.6) for g, (_, am) in ORIG_ROWS.items()]
    for family, table in (("option_order", ORDER), ("image_shuffle", SHUFFLE)):
        for g, variants in table.items():
            out += [rec(g, family, v, am, dataset, CONF.get((g, v), 0.5)) for v, am in variants.items()]
    return out


def noisy_records():
    """The records of dataset d plus distractors that must be ignored: another dataset and another family."""
    other = [dict(r, argmax=(r["argmax"] + 1) % 3) for r in records("e")]
    text = [rec(g, "text", "suffix", (ORIG_ROWS[g][1] + 1) % 3) for g in ORIG_ROWS]
    return list(reversed(other + text + records("d")))  # input order must not matter


def test_worst_groups_max_flip_lines_and_order():
    got = worst_groups(noisy_records(), "option_order", "d", "max_flip")
    assert got == [
        "g4: orig answer 1 (label 1) -> variants reverse:0, shift1:0, shift2:0 (3/3 flipped)",
        "g1: orig answer 1 (label 1) -> variants reverse:2, shift1:0, shift2:1 (2/3 flipped)",
        "g3: orig answer 1 (label 2) -> variants reverse:1, shift1:2, shift2:2 (2/3 flipped)",  # tie with g1
        "g5: orig answer 0 (label 0) -> variants reverse:0, shift1:1, shift2:0 (1/3 flipped)",
    ]  # g2 never flips: left out


def test_worst_groups_max_asr_lists_groups_pulled_to_their_target():
    # group: (orig argmax, target, {variant: argmax}); label 0 everywhere
    table = {"g1": (0, 2, {"blunt": 2, "authority": 2, "context": 0}),
             "g2": (1, 1, {"blunt": 1, "authority": 1, "context": 1}),  # already the target: not attackable
             "g3": (0, 1, {"blunt": 1, "authority": 0, "context": 0}),
             "g4": (0, 2, {"blunt": 0, "authority": 1, "context": 0})}  # never takes the target
    out = []
    for g, (orig, target, variants) in table.items():
        out.append(rec(g, "orig", "orig", orig, label=0))
        out += [{**rec(g, "inject_text", v, am, label=0), "meta": {"target": target}} for v, am in variants.items()]
    assert worst_groups(list(reversed(out)), "inject_text", "d", "max_asr") == [
        "g1: orig answer 0 (label 0), target 2 -> variants authority:2, blunt:2, context:0 (2/3 took the target)",
        "g3: orig answer 0 (label 0), target 1 -> variants authority:0, blunt:1, context:0 (1/3 took the target)",
    ]


def test_worst_groups_max_drop():
    got = worst_groups(noisy_records(), "option_order", "d", "max_drop")
    assert [line.split(":")[0] for line in got] == ["g4", "g1", "g5"]  # g2 loses nothing, g3 gains
    assert got[0] == ("g4: acc 1.00 -> 0.00 (loss 1.00); orig answer 1 (label 1) -> variants reverse:0, "
                      "shift1:0, shift2:0")


def test_worst_groups_min_acc():
    got = worst_groups(noisy_records(), "option_order", "d", "min_acc")
    assert [line.split(":")[0] for line in got] == ["g4", "g1", "g3", "g5"]  # g3/g5 tie at 2/3; g2 all right
    assert got[1] == "g1: acc 0.33; label 1 -> variants reverse:2, shift1:0, shift2:1; orig answer 1 (label 1)"
    orig_only = worst_groups(noisy_records(), "orig", "d", "min_acc")
    assert orig_only == ["g3: acc 0.00; label 2 -> variants orig:1; orig answer 1 (label 2)"]


def test_worst_groups_min_gap_lists_groups_still_right_under_the_control():
    got = worst_groups(noisy_records(), "image_shuffle", "d", "min_gap")
    assert [line.split(":")[0] for line in got] == ["g1", "g3", "g5"]
    assert got[0] == "g1: still right under image_shuffle (acc 1.00); label 1 -> variants shuffled:1; orig answer 1 (label 1)"
    assert got[2].startswith("g5: still right under image_shuffle (acc 0.50)")


def test_worst_groups_max_ece_lists_confident_wrong_rows():
    got = worst_groups(noisy_records(), "option_order", "d", "max_ece")
    assert [line.split(" ")[0] for line in got] == [
        "g1|option_order|reverse",  # 0.9, tie with g4 broken by group
        "g4|option_order|shift1",  # 0.9
        "g3|option_order|reverse",  # 0.8
        "g5|option_order|shift1",  # 0.7
        "g1|option_order|shift1",  # 0.5, first of three ties by (group, row_id)
    ]
    assert got[0] == "g1|option_order|reverse (group g1, variant reverse): answer 2 with p=0.900, label 1"


def test_worst_groups_n_and_label_minus_one():
    assert len(worst_groups(records(), "option_order", "d", "max_flip", n=2)) == 2
    assert worst_groups(records(), "option_order", "d", "max_flip", n=1)[0].startswith("g4:")
    unscored = [dict(r, label=-1) if r["group_id"] == "g4" else r for r in records()]
    assert [x.split(":")[0] for x in worst_groups(unscored, "option_order", "d", "min_acc")] == ["g1", "g3", "g5"]


def test_worst_groups_refuses_empty_or_unusable_input():
    with pytest.raises(ValueError, match="no records of family 'text' on dataset 'd'"):
        worst_groups(records(), "text", "d", "max_flip")
    with pytest.raises(ValueError, match="no records"):
        worst_groups([], "option_order", "d", "max_flip")
    no_orig = [r for r in records() if r["family"] != "orig"]
    for check in ("max_flip", "max_drop"):
        with pytest.raises(ValueError, match="unperturbed"):
            worst_groups(no_orig, "option_order", "d", check)
    with pytest.raises(ValueError, match="did you mean 'max_flip'"):
        worst_groups(records(), "option_order", "d", "max_flp")
    with pytest.raises(ValueError, match="positive int"):
        worst_groups(records(), "option_order", "d", "max_flip", n=0)
    with pytest.raises(ValueError, match="more than one unperturbed"):
        worst_groups(records() + [dict(records()[0], row_id="dup")], "option_order", "d", "max_flip")


# ---------------------------------------------------------------------------------- on a real summary cell


def test_evaluate_cell_on_a_summarize_cell():
    summary = summarize(records(), n_boot=50, n_boot_ece=20)
    c = summary["families"]["option_order"]["d"]
    assert c["flip"] == pytest.approx((2 / 3 + 0 + 2 / 3 + 1 + 1 / 3) / 5)
    results = evaluate_cell("option_order", "d", c, {"max_flip": 0.5, "max_drop": 0.05, "min_acc": 0.5, "max_ece": 0.5})
    assert [r.check for r in results] == ["max_flip", "max_drop", "min_acc", "max_ece"]
    assert not results[0].passed and results[0].value == c["flip"]  # 0.533 > 0.5
    assert results[1].interval == tuple(c["delta_ci"]) and results[2].interval == tuple(c["acc_ci"])
    assert results[2].passed and results[2].value == pytest.approx((1 / 3 + 1 + 2 / 3 + 0 + 2 / 3) / 5)
    control = summary["families"]["image_shuffle"]["d"]
    (gap,) = evaluate_cell("image_shuffle", "d", control, {"min_gap": 0.15})
    assert gap.value == pytest.approx(0.8 - 0.5)  # orig acc 4/5, shuffled (1 + 0 + 1 + 0 + 1/2) / 5
    assert gap.interval == (-control["delta_ci"][1], -control["delta_ci"][0])
    with pytest.raises(KeyError, match="'asr'"):
        evaluate_cell("option_order", "d", c, {"max_asr": 0.5})


def test_max_flip_regression_boundary():
    """Fails only when the flip-rate rise's whole interval lies above the limit."""
    assert one("max_flip_regression", 0.0).passed  # interval [-0.01, 0.03] straddles 0
    assert one("max_flip_regression", 0.0, flip_diff_ci=[0.0, 0.02]).passed  # its lower end at the limit
    assert not one("max_flip_regression", 0.0, flip_diff_ci=[0.001, 0.02]).passed
    assert one("max_flip_regression", 0.02, flip_diff=0.03, flip_diff_ci=[0.02, 0.04]).passed
