"""Group-weighted accuracy, paired delta, flip rate, balanced accuracy and the baselines, by hand."""

import pytest

from laya_robustness.metrics.accuracy import (
    balanced_accuracy,
    chance_rate,
    flip_rate,
    group_accuracy,
    group_means,
    majority_rate,
    orig_by_group,
    paired_delta,
)


def rec(group, label, argmax, k=2, family="text", dataset="d"):
    return {"dataset": dataset, "group_id": group, "family": family, "label": label, "argmax": argmax, "logits": [0.0] * k}


def test_group_with_seven_rows_counts_once():
    rows = [rec("a", 0, 0)] * 2 + [rec("a", 0, 1)] * 5  # 2/7 correct
    rows += [rec("b", 1, 1)]  # 1
    rows += [rec("c", 0, 0), rec("c", 0, 1)]  # 1/2
    assert len(rows) == 10
    expected = (2 / 7 + 1 + 0.5) / 3
    assert group_accuracy(rows) == pytest.approx(expected)
    assert group_accuracy(rows) != pytest.approx(4 / 10)  # the row-pooled answer


def test_rows_without_a_label_are_left_out_of_accuracy():
    rows = [rec("a", 0, 0), rec("a", -1, 1), rec("b", 1, 0), rec("z", -1, 0)]
    assert group_means(rows) == {("d", "a"): 1.0, ("d", "b"): 0.0}
    assert group_accuracy(rows) == pytest.approx(0.5)
    assert group_accuracy([rec("z", -1, 0)]) is None


def test_groups_are_kept_apart_by_dataset():
    rows = [rec("a", 0, 0, dataset="x"), rec("a", 0, 1, dataset="y"), rec("a", 0, 1, dataset="y")]
    assert group_accuracy(rows) == pytest.approx(0.5)


def test_paired_delta_uses_only_groups_in_both():
    orig = [rec("a", 0, 0, family="orig"), rec("b", 0, 1, family="orig"), rec("d", 0, 0, family="orig")]
    fam = [rec("a", 0, 0), rec("a", 0, 1), rec("b", 0, 0), rec("c", 0, 0)]
    # a: 0.5 - 1 = -0.5, b: 1 - 0 = +1; c (no orig) and d (no family row) are not paired
    assert paired_delta(fam, orig) == pytest.approx(0.25)
    assert paired_delta(fam, orig) != pytest.approx(group_accuracy(fam) - group_accuracy(orig))


def test_flip_rate_by_hand():
    orig = [rec("a", 0, 0, k=3, family="orig"), rec("b", 1, 1, family="orig")]
    fam = [rec("a", 1, 0, k=3), rec("a", 1, 1, k=3), rec("a", 1, 2, k=3)]  # 2 of 3 flip (one to the right answer)
    fam += [rec("b", 1, 1), rec("b", 1, 1)]  # no flip
    fam += [rec("c", 0, 1)]  # no orig row: left out
    assert flip_rate(fam, orig) == pytest.approx((2 / 3 + 0) / 2)
    assert flip_rate(orig, orig) == 0.0
    assert flip_rate(fam, []) is None


def test_flip_rate_counts_rows_without_a_label():
    orig = [rec("a", 0, 0, family="orig")]
    assert flip_rate([rec("a", -1, 1), rec("a", -1, 0)], orig) == pytest.approx(0.5)


def test_balanced_accuracy_is_group_weighted():
    rows = [rec("a", 0, 0), rec("a", 0, 1)]  # label 0, weights 1/2: hit 0.5 of 1
    rows += [rec("b", 1, 1)]  # label 1, weight 1: hit 1
    rows += [rec("c", 0, 1)]  # label 0, weight 1: hit 0
    rows += [rec("d", 1, 1)] + [rec("d", 1, 0)] * 3  # label 1, weights 1/4: hit 0.25 of 1
    recall0 = (0.5 + 0) / 2
    recall1 = (1 + 0.25) / 2
    assert balanced_accuracy(rows) == pytest.approx((recall0 + recall1) / 2)  # 0.4375
    assert balanced_accuracy(rows) != pytest.approx((1 / 3 + 2 / 5) / 2)  # row-pooled recalls


def test_chance_and_majority_come_from_the_orig_rows():
    orig = [rec("a", 1, 0, k=4, family="orig"), rec("b", 1, 1, family="orig"), rec("c", 0, 0, family="orig")]
    orig += [rec("e", 1, 1, k=3, family="orig")]  # a group the family lacks
    fam = [rec("a", 1, 1, k=4)] * 3 + [rec("b", 1, 1), rec("c", 0, 0)]
    assert chance_rate(fam, orig) == pytest.approx((1 / 4 + 1 / 2 + 1 / 2) / 3)
    assert majority_rate(fam, orig) == pytest.approx(2 / 3)
    assert majority_rate(orig, orig) == pytest.approx(3 / 4)
    assert chance_rate(fam, []) is None


def test_two_orig_rows_in_one_group_is_an_error():
    with pytest.raises(ValueError, match="more than one"):
        orig_by_group([rec("a", 0, 0, family="orig"), rec("a", 0, 1, family="orig")])


def test_missing_field_is_an_error():
    with pytest.raises(ValueError, match="argmax"):
        group_accuracy([{"dataset": "d", "group_id": "a", "label": 0, "logits": [0, 1]}])
