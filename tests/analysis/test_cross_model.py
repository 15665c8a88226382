"""Stability across models: the Matthews correlation and precision/recall against scikit-learn, the
correctness predictor on cases with a known answer, the same-rows check, and two synthetic models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laya_robustness.metrics.cross_model import (
    POOLED,
    check_same_rows,
    correctness_predictor,
    cross_model_analysis,
    matthews,
    precision_at_recall,
    precision_recall_points,
    recall_at_precision,
    split,
)
from laya_robustness.metrics.stability_analysis import Sample

from helpers.synthetic import MODALITY_OF, synthetic_records

# -- formulas ---------------------------------------------------------------------------------------------------


def test_matthews_against_scikit_learn_and_none_when_a_side_is_constant():
    from sklearn.metrics import matthews_corrcoef

    rng = np.random.default_rng(0)
    for _ in range(30):
        a = rng.random(50) < 0.6
        b = np.where(rng.random(50) < 0.7, a, ~a)
        assert matthews(a, b) == pytest.approx(matthews_corrcoef(a, b), abs=1e-12)
    assert matthews([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 / np.sqrt(12))  # by hand
    assert matthews([1, 1, 1], [1, 0, 1]) is None


def test_precision_recall_points_against_scikit_learn():
    from sklearn.metrics import precision_recall_curve

    rng = np.random.default_rng(1)
    for _ in range(20):
        y = rng.random(60) < 0.5
        scores = np.round(rng.random(60) + 0.3 * y, 2)  # rounded: ties
        precision, recall, thresholds = precision_recall_curve(y, scores)
        expected = {round(float(t), 10): (p, r) for p, r, t in zip(precision[:-1], recall[:-1], thresholds)}
        got = {round(t, 10): (p, r) for t, p, r in precision_recall_points(scores, y)}
        assert set(expected) <= set(got)
        for t, (p, r) in expected.items():
            assert got[t] == pytest.approx((p, r))


def test_recall_at_precision_by_hand_and_when_it_is_never_reached():
    scores, y = [0.9, 0.8, 0.7, 0.6, 0.5], [True, True, False, True, False]
    # thresholds 0.9 .. 0.5: precision 1, 1, 2/3, 3/4, 3/5; recall 1/3, 2/3, 2/3, 1, 1
    assert recall_at_precision(scores, y, 0.92) == {"recall": 2 / 3, "threshold": 0.8, "best_precision": 1.0}
    assert recall_at_precision(scores, y, 0.75) == {"recall": 1.0, "threshold": 0.6, "best_precision": 1.0}
    never = recall_at_precision([0.9, 0.8, 0.7], [False, True, True], 0.92)
    assert never == {"recall": None, "threshold": None, "best_precision": 2 / 3}
    assert precision_at_recall(scores, y, 2 / 3) == 1.0
    assert precision_at_recall(scores, y, 1.0) == 0.75
    assert precision_at_recall(scores, y, None) is None


def test_split_is_seeded_disjoint_and_three_to_one():
    keys = [("d", f"g{i:03d}") for i in range(100)]
    train, test = split(keys, 0, "d")
    assert (len(train), len(test)) == (75, 25) and not set(train) & set(test)
    assert split(list(reversed(keys)), 0, "d") == (train, test)
    assert split(keys, 1, "d") != (train, test)


# -- the predictor on cases with a known answer -------------------------------------------------------------------


def sample(i: int, stable: bool, correct: bool, confidence: float = 0.7) -> Sample:
    return Sample("d", f"g{i:03d}", "c", "d", correct, confidence, {"visual": 0.0 if stable else 0.7},
                  {"visual": 2}, {"shift": stable})


def test_a_source_whose_stability_is_the_targets_correctness_predicts_it_perfectly():
    source = {s.key: s for s in (sample(i, i % 3 != 0, True) for i in range(80))}
    target = {s.key: s for s in (sample(i, True, i % 3 != 0, confidence=0.6 + 0.001 * i) for i in range(80))}
    out = correctness_predictor(source, target, seed=0, name="d")
    assert (out["n_train"], out["n_test"], out["features"]) == (60, 20, ["stable:shift"])
    result = out["result"]
    assert result["predictor"]["recall"] == 1.0 and result["predictor"]["best_precision"] == 1.0
    assert result["coefficients"]["stable:shift"] > 0
    # the target's confidence rises with the index and carries no information on correctness here
    assert result["confidence"]["recall"] is None or result["confidence"]["recall"] < 1.0


def test_a_source_unrelated_to_the_target_does_not_reach_the_precision():
    source = {s.key: s for s in (sample(i, i % 2 == 0, True) for i in range(80))}
    target = {s.key: s for s in (sample(i, True, i % 4 < 2) for i in range(80))}
    result = correctness_predictor(source, target, seed=0, name="d")["result"]
    assert result["predictor"]["recall"] is None
    assert result["predictor"]["best_precision"] < 0.92


def test_nothing_to_fit_says_why():
    source = {s.key: s for s in (sample(i, i % 2 == 0, True) for i in range(40))}
    target = {s.key: s for s in (sample(i, True, True) for i in range(40))}
    out = correctness_predictor(source, target, seed=0, name="d")
    assert out["result"] is None and out["reason"] == "the target's training answers are all right or all wrong"


# -- files of the same rows --------------------------------------------------------------------------------------


def test_files_that_do_not_hold_the_same_rows_are_an_error_naming_what_differs():
    a = synthetic_records("a", 4, datasets=("synth_yesno",))
    b = synthetic_records("b", 4, datasets=("synth_yesno",))
    check_same_rows({"A": a, "B": b})
    with pytest.raises(ValueError, match=r"B lacks 1 row\(s\) of A \(e\.g\. synth_yesno/0000\)"):
        check_same_rows({"A": a, "B": b[1:]})
    with pytest.raises(ValueError, match=r"B has 1 row\(s\) A lacks"):
        check_same_rows({"A": a[1:], "B": b})
    changed = [dict(r, family="other") if i == 3 else r for i, r in enumerate(b)]
    with pytest.raises(ValueError, match=r"row synth_yesno/0000\|shift\|v2 \(synth_yesno\): family is 'shift' "
                                         r"in A, 'other' in B"):
        cross_model_analysis({"A": a, "B": changed}, MODALITY_OF)
    with pytest.raises(ValueError, match="two or more models"):
        cross_model_analysis({"A": a}, MODALITY_OF)


def test_sets_outside_the_study_need_not_be_in_every_file():
    """A dataset without a variant of a family with a modality (a caption set, a set run only through
    controls) takes no part: one model's run may hold it and another's not; the study's sets must match."""
    a = synthetic_records("a", 30, datasets=("synth_yesno",))
    b = synthetic_records("b", 30, datasets=("synth_yesno",))
    captions = [dict(r, dataset="captions", row_id=f"captions/{r['row_id']}") for r in a if r["family"] == "orig"]
    assert cross_model_analysis({"A": a + captions, "B": b}, MODALITY_OF) == cross_model_analysis({"A": a, "B": b},
                                                                                                 MODALITY_OF)
    shifted = [dict(r, dataset="extra", row_id=f"extra/{r['row_id']}") for r in a]
    with pytest.raises(ValueError, match="B lacks"):
        cross_model_analysis({"A": a + shifted, "B": b}, MODALITY_OF)


# -- two synthetic models ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def related():
    return cross_model_analysis({"A": synthetic_records("model_a", 120), "B": synthetic_records("model_b", 120)},
                                MODALITY_OF)


def test_models_with_shared_fragility_have_correlated_stability(related):
    unrelated = cross_model_analysis({"A": synthetic_records("model_a", 120, weight=0.0),
                                      "B": synthetic_records("model_b", 120, weight=0.0)}, MODALITY_OF)
    mcc = related["datasets"][POOLED]["mcc"]["visual"]
    assert mcc["models"] == ["A", "B"] and mcc["n"] == [[360, 360], [360, 360]]
    assert mcc["matrix"][0][0] == 1.0 and mcc["matrix"][0][1] == mcc["matrix"][1][0]
    assert mcc["matrix"][0][1] > 0.2
    assert abs(unrelated["datasets"][POOLED]["mcc"]["visual"]["matrix"][0][1]) < 0.15


def test_the_predictor_runs_both_ways_per_dataset_and_pooled(related):
    assert list(related["datasets"]) == ["synth_choice", "synth_open", "synth_yesno", POOLED]
    for block in related["datasets"].values():
        pairs = [(p["source"], p["target"]) for p in block["predictors"]]
        assert pairs == [("A", "B"), ("B", "A")]
    pooled = related["datasets"][POOLED]["predictors"][0]
    assert pooled["features"] == ["stable:language", "stable:pad_crop", "stable:rephrase", "stable:shift"]
    assert (pooled["n_samples"], pooled["n_train"], pooled["n_test"]) == (360, 270, 90)
    assert pooled["result"]["confidence"] is None  # the open rows have no confidence
    choice = related["datasets"]["synth_choice"]["predictors"][0]["result"]
    assert choice["confidence"] is not None
    assert json.loads(json.dumps(related)) == related


def test_the_entropies_can_be_added_as_features():
    out = cross_model_analysis({"A": synthetic_records("model_a", 40, datasets=("synth_choice",)),
                                "B": synthetic_records("model_b", 40, datasets=("synth_choice",))},
                               MODALITY_OF, with_entropy=True)
    features = out["datasets"]["synth_choice"]["predictors"][0]["features"]
    assert features[-3:] == ["entropy:visual", "entropy:phrasing", "entropy:language"]
    assert list(out["datasets"]) == ["synth_choice"]  # one dataset: no pooled block


def test_the_predictor_table_says_when_the_precision_is_never_reached():
    from laya_robustness.report.stability_tables import format_cross_model

    def predictor(source, target, recall, best):
        reading = {"recall": recall, "threshold": None, "best_precision": best}
        return {"source": source, "target": target, "features": ["stable:shift"], "n_train": 30, "n_test": 10,
                "target_acc_test": 0.8, "precision": 0.92, "reason": None,
                "result": {"predictor": reading, "confidence": {**reading, "recall": None},
                           "confidence_precision_at_predictor_recall": None if recall is None else 0.87}}

    cross = {"models": ["A", "B"], "datasets": {"d": {"mcc": {"visual": {"models": ["A", "B"],
                                                                         "matrix": [[1.0, 0.3], [0.3, 1.0]]}},
                                                      "predictors": [predictor("A", "B", 0.4, 1.0),
                                                                     predictor("B", "A", None, 0.75)]}}}
    lines = format_cross_model(cross).splitlines()
    assert lines[1:4] == ["model  A     B", "A      1.00  0.30", "B      0.30  1.00"]
    a_to_b = next(line for line in lines if line.startswith("A -> B"))
    b_to_a = next(line for line in lines if line.startswith("B -> A"))
    assert "0.400" in a_to_b and "0.870" in a_to_b and "not reached (best precision 1.000)" in a_to_b
    assert "not reached (best precision 0.750)" in b_to_a
