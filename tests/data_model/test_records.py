"""Prediction records are validated once, where they are made or read, naming the row and the field."""

import dataclasses

import pytest
from PIL import Image

from laya_robustness.records import parse_records, PredictionError, Record
from laya_robustness.run.pipeline.chunks import prediction_record
from laya_robustness.rows import Row

TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}
ROW = Row(row_id="d/1", dataset="d", group_id="d/1", cluster="img1", images=(Image.new("RGB", (4, 4)),),
          question="q?", options=("a", "b", "c"), label=2)


def test_a_scored_row_becomes_a_typed_record():
    r = prediction_record(ROW, [0.5, 0.123456, 2.0], TEMPERATURES)
    assert isinstance(r, Record) and r.argmax == 2 and r.logits == [0.5, 0.1235, 2.0]
    assert (r.row_id, r.group, r.label, r.is_orig, r.meta) == ("d/1", ("d", "d/1"), 2, True, {})
    assert abs(sum(r.probs) - 1) < 1e-4 and r["n_images"] == 1


def test_a_wrong_typed_field_is_caught_when_the_record_is_made():
    with pytest.raises(PredictionError, match="row d/1: field 'group_id': expected a non-empty string, got 7"):
        prediction_record(dataclasses.replace(ROW, group_id=7), [0.0, 1.0, 2.0], TEMPERATURES)
    with pytest.raises(PredictionError, match="field 'label'"):
        prediction_record(dataclasses.replace(ROW, label=3), [0.0, 1.0, 2.0], TEMPERATURES)


def test_parse_is_idempotent_and_names_the_bad_record():
    good = prediction_record(ROW, [0.0, 1.0, 2.0], TEMPERATURES)
    assert Record.parse(good, "x") is good
    with pytest.raises(PredictionError, match="record 1: field 'meta': expected an object"):
        parse_records([good, {**good, "meta": [1]}])
    with pytest.raises(PredictionError, match="field 'row_id': missing"):
        parse_records([{k: v for k, v in good.items() if k != "row_id"}])


def test_a_missing_meta_key_names_the_family_that_writes_it():
    r = Record.parse({**prediction_record(ROW, [0.0, 1.0, 2.0], TEMPERATURES), "family": "inject_text"}, "x")
    with pytest.raises(PredictionError, match="d/1: field 'meta.target': missing \\(family inject_text writes it\\)"):
        r.meta_value("target")


def test_an_open_answer_record_is_judged_on_normalised_text():
    from laya_robustness.run.pipeline.chunks import open_record

    row = dataclasses.replace(ROW, options=(), label=-1, primitive="open")
    object.__setattr__(row, "answers", ("Stop sign", "stop"))  # accepted answers (the Row field of open rows)
    r = open_record(row, "  STOP. ")
    assert (r.is_open, r["answer"], r["answers"], r["correct"], r.argmax, r.logits) == (
        True, "stop", ["stop sign", "stop"], True, -1, [])
    wrong = open_record(row, "Yield")
    assert wrong["correct"] is False and wrong["raw_answer"] == "Yield"
    with pytest.raises(PredictionError, match="field 'correct': expected true or false"):
        Record.parse({**r, "correct": "yes"}, "x")
    with pytest.raises(PredictionError, match="field 'logits': an open-answer record has none"):
        Record.parse({**r, "logits": [0.1]}, "x")


def test_open_rows_count_in_accuracy_and_flip_by_their_answer_text():
    from laya_robustness.metrics.accuracy import flip_rate, group_accuracy

    base = {"dataset": "d", "group_id": "g", "cluster": "c", "primitive": "open", "label": -1, "argmax": -1,
            "logits": [], "probs": [], "answers": ["stop"], "raw_answer": ""}
    orig = [{**base, "row_id": "g", "answer": "stop", "correct": True}]
    variants = [{**base, "row_id": "g|v1", "answer": "stop", "correct": True},
                {**base, "row_id": "g|v2", "answer": "halt", "correct": False}]
    assert group_accuracy(orig) == 1.0 and group_accuracy(variants) == 0.5
    assert flip_rate(variants, orig) == 0.5


def test_scoring_sends_open_rows_to_generate_and_the_rest_to_the_logits():
    from laya_robustness.run.pipeline.chunks import Scoring

    class Scorer:
        def score_batch(self, rows):
            return [[0.0, 1.0, 2.0] for _ in rows]

        def generate(self, rows, max_new_tokens=16):
            return ["Stop." for _ in rows]

    open_row = dataclasses.replace(ROW, row_id="d/2", group_id="d/2", options=(), label=-1, primitive="open")
    object.__setattr__(open_row, "answers", ("stop",))
    records = Scoring(Scorer(), "batch", TEMPERATURES).records([ROW, open_row, ROW])
    assert [r.primitive for r in records] == ["choice", "open", "choice"]
    assert records[0].argmax == 2 and records[1]["correct"] is True
    with pytest.raises(TypeError, match="cannot generate: open-answer rows need a scorer with generate"):
        Scoring(type("NoGenerate", (), {"score_batch": Scorer.score_batch})(), "batch", TEMPERATURES).records([open_row])
