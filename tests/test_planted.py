"""The planted regression moves exactly the drawn share of one family's answers, to the runner-up."""

import numpy as np

from fakes import OracleScorer
from laya_robustness.calibrate import format_calibration
from laya_robustness.fixture_rows import generate_rows
from laya_robustness.families import build_variants
from laya_robustness.scoring.planted import PlantedRegression


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
