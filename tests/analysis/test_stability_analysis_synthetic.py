"""The synthetic records of the stability analyses' tests (``helpers.synthetic``): a function of their keys, and
valid prediction records."""

from helpers.synthetic import FAMILIES, synthetic_records, write_models


def test_the_synthetic_records_are_a_function_of_their_keys():
    assert synthetic_records("m", 10) == synthetic_records("m", 10)
    assert synthetic_records("m", 10) != synthetic_records("other", 10)


def test_the_synthetic_records_are_valid_prediction_records(tmp_path):
    from laya_robustness.predictions import read_predictions

    path = write_models(tmp_path, n_groups=5, models=("m",))[0]
    records = read_predictions(path)
    assert len(records) == 3 * 5 * (1 + sum(n for _, n in FAMILIES.values()))
    assert {r["primitive"] for r in records} == {"noul", "choice", "open"}
