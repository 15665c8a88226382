"""A generation-only scorer (a served model without probabilities): the extraction rules, its records, every
metric that needs probabilities saying it is not available, max_ece not applicable, and the stability study with
a served model as the target. No server here (tests/served/test_served.py runs the real one)."""

from __future__ import annotations

import numpy as np
import pytest

from laya_robustness.families import build_variants
from laya_robustness.gate.catalogue import INVARIANCE_CATALOGUE
from laya_robustness.gate.judgement import evaluate_cell, evaluate_invariance
from laya_robustness.gate.results import NOT_APPLICABLE
from laya_robustness.gate.verdict import FAIL, cell_verdict
from laya_robustness.metrics.cross_model import cross_model_analysis
from laya_robustness.records import NO_PROBABILITIES, UNPARSED_ANSWER, PredictionError, Record
from laya_robustness.report.tables import format_floor_table, format_table
from laya_robustness.run.pipeline.invariance import compare_answers
from laya_robustness.run.pipeline.chunks import answer_record
from laya_robustness.scoring.base import Answer, label_choice
from laya_robustness.scoring.extraction import Extraction, extract
from laya_robustness.scoring.served import option_logits
from laya_robustness.summary import summarize

from helpers.synthetic import MODALITY_OF, synthetic_records

COLOURS = ("red", "blue", "green", "yellow")


@pytest.mark.parametrize("text, index, rule", [
    ("B", 1, "letter"), ("b.", 1, "letter"), ("(B)", 1, "letter"), ("B)", 1, "letter"), ("B:", 1, "letter"),
    ("Answer: B", 1, "letter"), ("The answer is C.", 2, "letter"), ("answer is (d)", 3, "letter"),
    (" Blue.", 1, "text"), ("BLUE", 1, "text"), ("  green  !", 2, "text"), ('"Yellow"', 3, "text"),
    ("B. blue", 1, "letter_text"), ("(b) Blue", 1, "letter_text"), ("Answer: C. green", 2, "letter_text"),
    ("B. green", None, "unparsed"),  # the letter of one option and the text of another
    ("E", None, "unparsed"), ("purple", None, "unparsed"), ("", None, "unparsed"), ("A or B", None, "unparsed"),
    ("red blue", None, "unparsed"), ("B. purple", None, "unparsed"),
])
def test_a_choice_answer_names_an_option_by_the_documented_rules(text, index, rule):
    assert extract(text, COLOURS, "choice") == Extraction(index, rule)


@pytest.mark.parametrize("text, index", [("Yes", 1), ("no.", 0), (" YES!", 1), ("Answer: yes", 1), ("B", None),
                                         ("maybe", None), ("yes no", None)])
def test_a_yes_no_row_is_answered_by_the_option_text_only(text, index):
    assert extract(text, ("no", "yes"), "noul").index == index


def test_an_answer_two_options_share_is_unparsed_never_a_pick():
    assert extract("red", ("red", "Red", "blue"), "choice").rule == "unparsed"
    assert extract("a", ("a", "b"), "choice").index == 0  # the letter and the text name the same option


def test_the_chosen_option_is_mapped_back_to_label_order(fixture_rows):
    shown = build_variants("option_order", fixture_rows["colour_choice"][:1], 0)[1]
    index = extract(shown.shown_options[0], shown.shown_options, shown.primitive).index
    assert shown.options[label_choice(shown, index)] == shown.shown_options[0]


def test_option_probabilities_from_first_token_logprobs():
    top = [{"token": " re", "logprob": -0.2}, {"token": "B", "logprob": -2.0}, {"token": " bl", "logprob": -3.0},
           {"token": " g", "logprob": -4.0}, {"token": " ", "logprob": -5.0}]
    logits = option_logits(top, COLOURS, "choice")
    assert logits[0] == pytest.approx(-0.2) and logits[2] == pytest.approx(-4.0)
    assert logits[1] == pytest.approx(np.log(np.exp(-2.0) + np.exp(-3.0)))  # its letter and its first letters
    assert logits[3] == pytest.approx(-5.0)  # no listed token fits yellow: the smallest listed log-probability
    assert option_logits([{"token": " b", "logprob": -1.0}], ("blue", "brown"), "noul")[0] == -1.0  # fits two


def _record(row, text, choice, rule="text"):
    return answer_record(row, Answer(text, choice, rule), {"choice": 1.0, "noul": 1.0, "score": 1.0})


def test_a_generation_only_record_holds_the_option_or_unparsed_and_the_text(fixture_rows):
    row = fixture_rows["colour_choice"][0]
    record = _record(row, " red", 0)
    assert record["logits"] == record["probs"] == [] and record["n_options"] == 4 and record["raw_answer"] == " red"
    unparsed = _record(row, "I cannot tell", None, "unparsed")
    assert unparsed["argmax"] == UNPARSED_ANSWER and unparsed["extraction"] == "unparsed"
    for bad, field in [({**record, "argmax": -1}, "argmax"), ({**unparsed, "argmax": 0}, "argmax"),
                       ({**record, "probs": [1.0]}, "probs"), ({**record, "n_options": 0}, "n_options")]:
        with pytest.raises(PredictionError, match=field):
            Record.parse(bad, "test")
    with_logits = answer_record(row, Answer(" red", 0, "text", np.array([0.0, -1.0, -2.0, -3.0])),
                                {"choice": 1.0, "noul": 1.0, "score": 1.0})
    assert with_logits["argmax"] == 0 and len(with_logits["probs"]) == 4 and with_logits["extraction"] == "text"


def _served_records(fixture_rows):
    """Orig and option_order / abstain / form / negation / injection rows of two sets answered in text: the label
    where the row's index is even, unparsed where it is 3 mod 4, else the first other option."""
    families = ("option_order", "option_set", "abstain", "form_choice", "negation", "inject_text")
    rows = [r for d in ("colour_choice", "exists_yesno") for r in fixture_rows[d][:12]]
    rows += [v for f in families for d in ("colour_choice", "exists_yesno") for v in
             build_variants(f, fixture_rows[d][:12], 0)]
    out = []
    for i, row in enumerate(rows):
        wrong = next(j for j in range(len(row.options)) if j != max(row.label, 0))
        choice = None if i % 4 == 3 else max(row.label, 0) if i % 2 == 0 else wrong
        out.append(_record(row, "x", choice, "unparsed" if choice is None else "text"))
    return out


def test_every_probability_based_number_says_it_is_not_available(fixture_rows):
    summary = summarize(_served_records(fixture_rows), n_boot=50, n_boot_ece=20, ece_floor_sims=5)
    for block in ("families", "options", "form", "injection"):
        for family, cells in summary[block].items():
            for cell in cells.values():
                assert cell["probabilities"] == NO_PROBABILITIES, (block, family)
    flat = summary["families"]["option_order"]["colour_choice"]
    assert flat["ece"] is None and flat["ece_ci"] is None and flat["flip_floor"] is None
    assert flat["acc"] is not None and flat["flip"] is not None
    assert summary["form"]["negation"]["exists_yesno"]["complement_sum_mean"] is None
    assert summary["injection"]["inject_text"]["colour_choice"]["variants"]["blunt"]["delta_p_target"] is None
    assert summary["options"]["abstain"]["colour_choice"]["variants"]["drop_gold"]["p_max_mean"] is None
    floor = summary["floor"]["option_order"]["colour_choice"]  # no confidence to draw an ECE floor from
    assert floor["floor_mean"] is None and floor["probabilities"] == NO_PROBABILITIES
    assert "n/a: " + NO_PROBABILITIES in format_floor_table(summary)
    assert "ECE by family" not in format_table(summary) and NO_PROBABILITIES in format_table(summary)


def test_unparsed_counts_wrong_and_is_its_own_answer_for_flips(fixture_rows):
    row = fixture_rows["colour_choice"][0]
    variants = build_variants("option_order", [row], 0)
    orig = _record(row, "?", None, "unparsed")
    same = [_record(v, "?", None, "unparsed") for v in variants[:2]]
    right = [_record(v, v.options[v.label], v.label) for v in variants[2:]]
    cell = summarize([orig, *same, *right], n_boot=20, n_boot_ece=10)["families"]["option_order"]["colour_choice"]
    assert cell["acc"] == pytest.approx(len(right) / len(variants))  # unparsed is wrong, never a lucky pick
    assert cell["flip"] == pytest.approx(len(right) / len(variants))  # unparsed -> unparsed is no flip


def test_max_ece_is_not_applicable_with_the_reason_never_passed_silently(fixture_rows):
    summary = summarize(_served_records(fixture_rows), n_boot=20, n_boot_ece=10)
    cell = summary["families"]["option_order"]["colour_choice"]
    results = evaluate_cell("option_order", "colour_choice", cell, {"max_ece": 0.2})
    assert [(r.decision, r.value) for r in results] == [(NOT_APPLICABLE, None)]
    assert "ECE needs probabilities, " + NO_PROBABILITIES in results[0].detail
    assert cell_verdict(results, lambda check: None).outcome == NOT_APPLICABLE
    both = evaluate_cell("option_order", "colour_choice", cell, {"max_ece": 0.2, "max_flip": 0.0})
    assert cell_verdict(both, lambda check: None).outcome == FAIL  # the applicable limit still decides


def test_served_invariance_compares_answers_and_their_texts(fixture_rows):
    rows = fixture_rows["colour_choice"][:3]
    a = [Answer(" red", 0, "text"), Answer(" blue", 1, "text"), Answer("?", None, "unparsed")]
    b = [Answer(" red", 0, "text"), Answer(" Blue", 1, "text"), Answer(" green", 2, "text")]
    stats = compare_answers(rows, a, b, {})
    assert stats["flips"] == 1 and stats["bitwise"] is False and stats["max_abs_dp"] is None
    assert stats["flipped"][0]["answer"] == [UNPARSED_ANSWER, 2]
    limits = {"bitwise": True, "max_abs_dp": 1e-5, "max_abs_dlogit": 1e-4, "max_flips": 0}
    decided = {r.check: r.decision for r in evaluate_invariance("hostile", stats, limits)}
    assert decided == {"bitwise": "fail", "max_abs_dp": NOT_APPLICABLE, "max_abs_dlogit": NOT_APPLICABLE,
                       "max_flips": "fail"}
    assert INVARIANCE_CATALOGUE["max_abs_dp"].needs == "probabilities"


def _generation_only(records):
    """The same answers with no probabilities, as a served model without logprobs records them."""
    out = []
    for r in records:
        if r["primitive"] == "open":
            out.append(r)
            continue
        out.append({**r, "logits": [], "probs": [], "n_options": len(r["logits"]), "raw_answer": str(r["argmax"]),
                    "extraction": "text"})
    return out


def test_the_stability_study_predicts_a_served_models_correctness_without_its_probabilities():
    a, b = synthetic_records("model_a"), synthetic_records("model_b")
    with_probs = cross_model_analysis({"a": a, "b": b}, MODALITY_OF, seed=0)
    served = cross_model_analysis({"a": a, "b": _generation_only(b)}, MODALITY_OF, seed=0)
    for dataset, cell in served["datasets"].items():
        for got, want in zip(cell["predictors"], with_probs["datasets"][dataset]["predictors"]):
            if got["target"] == "b" and got["result"] is not None:
                assert got["result"]["predictor"] == want["result"]["predictor"]  # B's probabilities play no part
                assert got["result"]["confidence"] is None  # the served model's own confidence: not available
            elif got["result"] is not None:  # B as the source: its answers' stability alone
                assert got["result"]["predictor"] == want["result"]["predictor"]
    assert any(p["target"] == "b" and p["result"] for c in served["datasets"].values() for p in c["predictors"])
    assert any(p["target"] == "b" and p["result"] and p["result"]["confidence"] is not None
               for c in with_probs["datasets"].values() for p in c["predictors"])  # which the probabilities gave
