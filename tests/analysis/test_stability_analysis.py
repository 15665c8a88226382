"""One model's stability analyses: every number of a small hand-computed case, the formulas against
independent references (scikit-learn, numpy, plain loops), and the error messages."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from laya_robustness.answers import answer_of, is_correct
from laya_robustness.metrics.information import cmi_ratio
from laya_robustness.metrics.stability_analysis import answer_entropy, pearson, samples, stability_analysis
from laya_robustness.records import PredictionError

from helpers.records import record

MODALITY_OF = {"shift": "visual", "pad": "visual", "reph": "phrasing", "ctl": None}
H_1_OF_4 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # three answers agree, one differs
H_1_OF_3 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))


def rec(group: str, family: str, variant: str, argmax: int, label: int = 0, conf: float = 0.9, **extra) -> dict:
    probs = [conf, 1 - conf] if argmax == 0 else [1 - conf, conf]
    return record(group, family, variant, cluster=f"c{group}", dataset="d", primitive="noul", label=label,
                  logits=[0.0, 0.0], probs=probs, argmax=argmax, **extra)


def hand_records() -> list[dict]:
    """Four groups (see each line) and a fifth without an orig record."""
    out = []
    spec = [  # group, orig argmax, label, conf, category, shift, pad, reph
        ("g1", 0, 0, 0.90, "A", (0, 0), (0,), (0, 0)),  # stable everywhere, right
        ("g2", 1, 1, 0.80, "A", (1, 0), (1,), (1, 1)),  # shift moves once, right
        ("g3", 0, 1, 0.60, "B", (0, 0), (1,), (1, 0)),  # pad and reph move, wrong
        ("g4", 1, 0, 0.55, "B", (1, 1), (1,), (0, 0)),  # reph moves, wrong
    ]
    for g, a, label, conf, cat, shift, pad, reph in spec:
        out.append(rec(g, "orig", "orig", a, label, conf, category=cat))
        for fam, answers in (("shift", shift), ("pad", pad), ("reph", reph)):
            out += [rec(g, fam, f"v{i}", x, label, category=cat) for i, x in enumerate(answers)]
    out.append(rec("g4", "ctl", "v0", 0, 0, category="B"))  # a control: no modality, ignored
    out.append(rec("g5", "shift", "v0", 0, 0))  # no orig record
    return out


# -- answers, correctness, entropy -------------------------------------------------------------------------------


def test_answer_of_is_the_argmax_or_the_normalised_answer_text():
    assert answer_of(rec("g", "orig", "orig", 1)) == 1
    texts = ["Red", "red.", "  RED ", "red...", "red!"]
    assert {answer_of({"argmax": -1, "answer": t}) for t in texts} == {"red"}
    assert answer_of({"argmax": -1, "answer": "two  cats"}) == answer_of({"argmax": -1, "answer": "Two cats."})
    with pytest.raises(PredictionError, match=r"d/9: field 'answer': expected a string"):
        answer_of({"row_id": "d/9", "argmax": -1, "answer": 3})


def test_is_correct_for_choice_rows_open_rows_and_rows_without_a_label():
    from laya_robustness.answers import is_scored

    assert is_correct(rec("g", "orig", "orig", 1, label=1)) is True
    assert is_correct(rec("g", "orig", "orig", 0, label=1)) is False
    unlabelled = rec("g", "orig", "orig", 0, label=-1)
    assert is_correct(unlabelled) is False and not is_scored(unlabelled)  # no right answer: never right
    open_row = {"argmax": -1, "label": -1, "primitive": "open", "answer": "red"}
    assert is_correct({**open_row, "correct": True}) is True
    assert is_correct({**open_row, "correct": False}) is False
    with pytest.raises(PredictionError, match=r"field 'correct': expected true or false, got None"):
        is_correct(open_row)
    with pytest.raises(PredictionError, match=r"d/3: field 'correct': expected true or false, got 1"):
        is_correct({**open_row, "row_id": "d/3", "correct": 1})


def test_answer_entropy_by_hand_and_zero_iff_all_answers_agree():
    assert answer_entropy([1, 1, 0, 1]) == pytest.approx(H_1_OF_4)
    assert answer_entropy(["a", "b", "c", "d"]) == pytest.approx(math.log(4))
    assert answer_entropy(["a", "b", "c", "d"], base=2) == pytest.approx(2.0)
    rng = random.Random(3)
    for _ in range(200):
        answers = [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
        assert (answer_entropy(answers) == 0.0) == (len(set(answers)) == 1)
    with pytest.raises(ValueError, match="empty"):
        answer_entropy([])


# -- the hand-computed case ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand():
    return stability_analysis(hand_records(), MODALITY_OF)["d"]


def test_samples_hold_the_entropy_of_the_orig_answer_with_each_modalitys_variants():
    by_group = {s.group_id: s for s in samples(hand_records(), MODALITY_OF)}
    assert sorted(by_group) == ["g1", "g2", "g3", "g4"]
    assert by_group["g2"].entropy == {"visual": pytest.approx(H_1_OF_4), "phrasing": 0.0}
    assert by_group["g3"].entropy == {"visual": pytest.approx(H_1_OF_4), "phrasing": pytest.approx(H_1_OF_3)}
    assert by_group["g3"].family_stable == {"shift": True, "pad": False, "reph": False}
    assert by_group["g4"].n_variants == {"visual": 3, "phrasing": 2}
    assert (by_group["g1"].correct, by_group["g4"].correct, by_group["g4"].confidence) == (True, False, 0.55)


def test_stable_shares_by_hand(hand):
    shares = {k: (v["share"], v["n_samples"]) for k, v in hand["stable_shares"].items()}
    assert shares == {"visual": (0.5, 4), "phrasing": (0.5, 4), "language": (None, 0),
                      "visual+phrasing": (0.25, 4), "all": (0.25, 4)}
    assert (hand["n_samples"], hand["n_groups_without_orig"]) == (4, 1)
    assert hand["modalities"] == ["visual", "phrasing"]
    assert hand["families"] == {"visual": ["pad", "shift"], "phrasing": ["reph"]}


def test_entropy_histogram_by_hand(hand):
    hist = hand["entropy_histogram"]
    assert hist["edges"] == [0.0, 0.25, 0.5, 0.75]
    assert hist["counts"] == {"visual": [2, 0, 0, 2], "phrasing": [2, 0, 0, 2]}


def test_category_table_by_hand(hand):
    table = hand["by_category"]
    assert table["categories"] == ["A", "B"]
    got = {t: (v["by_category"], v["mean_over_categories"], v["all_samples"]) for t, v in table["types"].items()}
    assert got == {
        "pad": ({"A": 0.0, "B": 0.5}, 0.25, 0.25),
        "shift": ({"A": 0.5, "B": 0.0}, 0.25, 0.25),
        "reph": ({"A": 0.0, "B": 1.0}, 0.5, 0.5),
        "any visual": ({"A": 0.5, "B": 0.5}, 0.5, 0.5),
        "any phrasing": ({"A": 0.0, "B": 1.0}, 0.5, 0.5),
    }


def test_category_falls_back_to_the_dataset_name():
    records = [{k: v for k, v in r.items() if k != "category"} for r in hand_records()]
    assert stability_analysis(records, MODALITY_OF)["d"]["by_category"]["categories"] == ["d"]


def test_accuracy_given_stability_by_hand(hand):
    acc = hand["accuracy_given_stability"]
    assert (acc["baseline"], acc["n_samples"]) == (0.5, 4)
    t = acc["types"]
    assert (t["visual"]["acc_stable"], t["visual"]["acc_unstable"], t["visual"]["prevalence"], t["visual"]["lift"]) \
        == (0.5, 0.5, 0.5, 0.0)
    assert (t["phrasing"]["acc_stable"], t["phrasing"]["acc_unstable"], t["phrasing"]["lift"]) == (1.0, 0.0, 0.5)
    assert (t["visual+phrasing"]["acc_stable"], t["visual+phrasing"]["acc_unstable"]) == (1.0, pytest.approx(1 / 3))
    assert (t["visual+phrasing"]["prevalence"], t["visual+phrasing"]["n_stable"]) == (0.25, 1)
    assert t["all"] == t["visual+phrasing"]
    assert t["language"] == {"prevalence": None, "acc_stable": None, "acc_unstable": None, "acc": None,
                             "lift": None, "n_samples": 0, "n_stable": 0}


def test_correlations_by_hand(hand):
    corr = hand["correlations"]
    assert corr["variables"] == ["phrasing", "visual", "confidence"]
    phrasing, visual, conf = [1, 1, 0, 0], [1, 0, 0, 1], [0.9, 0.8, 0.6, 0.55]
    m = corr["matrix"]
    assert m[0][1] == 0.0  # P and V agree on two samples, disagree on two
    assert m[0][2] == pytest.approx(np.corrcoef(phrasing, conf)[0, 1])
    assert m[1][2] == pytest.approx(np.corrcoef(visual, conf)[0, 1])
    assert m[0][2] == pytest.approx(0.275 / math.sqrt(0.081875))  # by hand
    assert corr["n"] == [[4] * 3] * 3


def test_the_cmi_block_is_the_adjusted_ratio_on_the_samples_entropies(hand):
    pair = hand["cmi"]["pairs"]["phrasing"]
    h_v, h_p, conf = [0, H_1_OF_4, H_1_OF_4, 0], [0, 0, H_1_OF_3, H_1_OF_3], [0.9, 0.8, 0.6, 0.55]
    expected = cmi_ratio(h_v, h_p, conf, seed=0, keys=("d", "phrasing", 2))
    assert {k: pair[k] for k in expected} == expected
    assert pair["n_samples"] == 4 and set(pair["sensitivity"]) == {"2", "3", "5", "10"}
    assert pair["readable"] is False and "4 samples are too few for 2 levels" in pair["unreadable"]
    assert pair["ratio_ci"] is None and hand["cmi"]["estimator"] == "chance-adjusted"


def test_control_families_and_their_answers_are_left_out():
    without = stability_analysis([r for r in hand_records() if r["family"] != "ctl"], MODALITY_OF)["d"]
    with_control = stability_analysis(hand_records(), MODALITY_OF)["d"]
    assert with_control.pop("families_not_counted") == ["ctl"]  # named as scored and not counted, nothing more
    assert without.pop("families_not_counted") == []
    assert without == with_control


def test_the_result_is_json_ready_and_independent_of_record_order():
    records = hand_records()
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    a, b = stability_analysis(records, MODALITY_OF), stability_analysis(shuffled, MODALITY_OF)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.loads(json.dumps(a)) == a  # plain floats, ints, None, str keys


def test_a_dataset_without_modality_variants_is_left_out():
    assert stability_analysis([r for r in hand_records() if r["family"] in ("orig", "ctl")], MODALITY_OF) == {}


def test_the_default_modalities_are_the_study_s_sets():
    """The study's visual set is its benign perturbations, its phrasing set the rephrasings: the gate's own
    ``image`` (JPEG, crops, brightness) and ``text`` (surface edits) families are scored but not counted."""
    from laya_robustness.families import modalities

    modality_of = modalities()
    by_modality = {m: sorted(f for f, fm in modality_of.items() if fm == m) for m in ("visual", "phrasing", "language")}
    assert by_modality == {"visual": ["overlay", "pad_crop", "rotation", "rotation_sweep", "scale", "scale_pad",
                                      "shift"],
                           "phrasing": ["rephrase"], "language": ["language"]}
    assert modality_of["image"] is None and modality_of["text"] is None
    assert modality_of["orig"] is None and modality_of["image_shuffle"] is None
    records = [{**r, "family": {"shift": "shift", "pad": "image", "reph": "rephrase", "ctl": "text"}[r["family"]]}
               if r["family"] != "orig" else r for r in hand_records()]
    block = stability_analysis(records, modality_of)["d"]
    assert block["families"] == {"visual": ["shift"], "phrasing": ["rephrase"]}
    assert block["families_not_counted"] == ["image", "text"]
    assert block["stable_shares"]["visual"]["n_stable"] == 3  # pad (now image) no longer moves g3's visual answers


# -- open-answer rows ----------------------------------------------------------------------------------------------


def open_rec(group: str, family: str, variant: str, answer: str, correct: bool) -> dict:
    """An open-answer record as the scorer writes it: no logits, label and argmax -1, the generated text."""
    return {**rec(group, family, variant, 0, -1), "primitive": "open", "logits": [], "probs": [], "argmax": -1,
            "raw_answer": answer, "answer": answer, "answers": ["red"], "correct": correct}


def test_open_rows_compare_normalised_answer_texts_and_use_their_correct_field():
    records = [open_rec("o1", "orig", "orig", "Red", True), open_rec("o1", "shift", "a", "red.", True),
               open_rec("o1", "shift", "b", " RED", True), open_rec("o2", "orig", "orig", "blue", False),
               open_rec("o2", "shift", "a", "Blue", False), open_rec("o2", "shift", "b", "green", False)]
    block = stability_analysis(records, MODALITY_OF)["d"]
    assert block["stable_shares"]["visual"]["share"] == 0.5
    acc = block["accuracy_given_stability"]
    assert (acc["baseline"], acc["types"]["visual"]["acc_stable"], acc["types"]["visual"]["acc_unstable"]) \
        == (0.5, 1.0, 0.0)
    assert block["correlations"]["matrix"][0][1] is None  # an open row has no confidence


def test_a_group_mixing_answer_texts_and_argmaxes_is_an_error():
    records = [open_rec("o1", "orig", "orig", "red", True), rec("o1", "shift", "a", 0)]
    with pytest.raises(PredictionError, match=r"o1\|shift\|a: field 'answer': missing, while o1 of the same group"):
        stability_analysis(records, MODALITY_OF)


def test_two_orig_records_in_a_group_or_a_repeated_row_id_are_errors():
    records = hand_records()
    with pytest.raises(PredictionError, match=r"g1x: field 'family': a second orig record of group 'g1'"):
        stability_analysis(records + [{**records[0], "row_id": "g1x"}], MODALITY_OF)
    with pytest.raises(PredictionError, match=r"g1: field 'row_id': occurs more than once in dataset 'd'"):
        stability_analysis(records + [records[0]], MODALITY_OF)


def test_an_unknown_modality_is_an_error():
    with pytest.raises(ValueError, match=r"modality_of\['shift'\] = 'vision' is not one of visual"):
        stability_analysis(hand_records(), {"shift": "vision"})


# -- the formulas against independent references -------------------------------------------------------------------


def test_pearson_against_numpy_and_undefined_on_a_constant():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.normal(size=30), rng.normal(size=30)
        assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    assert pearson([1, 1, 1], [0, 1, 2]) is None
    assert pearson([1], [2]) is None


def test_the_result_holds_only_plain_python_types():
    def walk(value):
        if isinstance(value, dict):
            assert all(type(k) is str for k in value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        else:
            assert value is None or type(value) in (int, float, str, bool), (value, type(value))

    walk(stability_analysis(hand_records(), MODALITY_OF))
