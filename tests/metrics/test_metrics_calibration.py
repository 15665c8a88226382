"""Temperature-scaled softmax and the 15-bin ECE against hand-computed values and a plain loop."""

import math

import numpy as np
import pytest

from laya_robustness.metrics.calibration import (
    DEFAULT_TEMPERATURES,
    REFERENCE_TEMPERATURES,
    bin_indices,
    calibrated_probs,
    ece,
)
from laya_robustness.rng import keyed_rng


def test_temperature_tables():
    assert DEFAULT_TEMPERATURES == {"choice": 1.0, "noul": 1.0, "score": 1.0}
    assert REFERENCE_TEMPERATURES == {"choice": 2.20, "score": 1.37, "noul": 2.13}


def test_calibrated_probs_by_hand():
    # logits [1, 2, 4] / T=2 -> exp(0.5), exp(1), exp(2) = 1.64872, 2.71828, 7.38906; sum 11.75606
    probs = calibrated_probs([1.0, 2.0, 4.0], "choice", {"choice": 2.0})
    assert probs == pytest.approx([0.140245, 0.231224, 0.628531], abs=1e-6)
    assert sum(probs) == pytest.approx(1.0)


def test_calibrated_probs_uses_the_primitive_temperature():
    noul = calibrated_probs([0.0, 1.0], "noul", REFERENCE_TEMPERATURES)
    assert noul[1] == pytest.approx(1 / (1 + math.exp(-1 / 2.13)))
    assert calibrated_probs([0.0, 1.0], "choice", REFERENCE_TEMPERATURES)[1] != pytest.approx(noul[1])


def test_calibrated_probs_is_stable_for_large_logits():
    probs = calibrated_probs([1000.0, 1001.0, 990.0], "score", DEFAULT_TEMPERATURES)
    assert all(math.isfinite(p) for p in probs) and sum(probs) == pytest.approx(1.0)
    assert probs[1] > probs[0] > probs[2] > 0


@pytest.mark.parametrize(
    "logits, primitive, temps",
    [([], "choice", DEFAULT_TEMPERATURES), ([1.0, float("nan")], "choice", DEFAULT_TEMPERATURES),
     ([1.0], "other", DEFAULT_TEMPERATURES), ([1.0], "choice", {"choice": 0.0})],
)
def test_calibrated_probs_rejects_bad_input(logits, primitive, temps):
    with pytest.raises(ValueError):
        calibrated_probs(logits, primitive, temps)


def test_ece_by_hand():
    # bin of 0.9: acc 1/2, conf 0.9 -> 2/4 * 0.4; bin of 0.6: acc 1, conf 0.6 -> 2/4 * 0.4
    assert ece([0.9, 0.9, 0.6, 0.6], [True, False, True, True]) == pytest.approx(0.4)


def test_ece_bins_are_closed_on_the_right():
    assert bin_indices([0.0, 0.2, 0.21, 1.0]).tolist() == [0, 2, 3, 14]
    # 0.2 = 3/15 sits in (2/15, 3/15] with 0.19, not with 0.21
    assert ece([0.2, 0.21], [True, False]) == pytest.approx((0.8 + 0.21) / 2)
    assert ece([0.2, 0.19], [True, False]) == pytest.approx(abs(1 - 0.39) / 2)
    assert ece([0.0, 0.05], [False, True]) == pytest.approx(abs(1 - 0.05) / 2)


def test_every_edge_belongs_to_the_bin_below_it_and_one_to_the_top_bin():
    """e_k = k/15 as float64: e_k itself is bin k-1, the next double above it bin k, the one below bin k-1."""
    for k in range(1, 16):
        edge = k / 15
        above, below = np.nextafter(edge, 2.0), np.nextafter(edge, -1.0)
        assert bin_indices([below, edge]).tolist() == [k - 1, k - 1]
        if k < 15:
            assert bin_indices([above]).tolist() == [k]
    assert bin_indices([0.0, 5e-324, np.nextafter(1.0, 0.0), 1.0]).tolist() == [0, 0, 14, 14]
    # a softmax that rounds to one-hot gives a maximum probability of exactly 1.0: the top bin, with 0.95
    one_hot = max(calibrated_probs([0.0, 800.0], "choice", {"choice": 1.0}))
    assert one_hot == 1.0 and bin_indices([one_hot, 0.95]).tolist() == [14, 14]
    assert ece([1.0, 0.95], [True, False]) == pytest.approx(abs(1 - 1.95) / 2)
    assert ece([1.0, 0.9], [True, False]) == pytest.approx((0.0 + 0.9) / 2)  # 0.9 is bin 13 = (13/15, 14/15]


def plain_ece(conf, correct, n_bins=15):
    total = 0.0
    for b in range(n_bins):
        members = [i for i, c in enumerate(conf) if b / n_bins < c <= (b + 1) / n_bins or (b == 0 and c == 0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            mean_conf = sum(conf[i] for i in members) / len(members)
            total += len(members) / len(conf) * abs(acc - mean_conf)
    return total


def test_ece_matches_a_plain_loop_on_random_data():
    rng = keyed_rng(0, "test", "ece")
    conf = [float(c) for c in rng.uniform(0.0, 1.0, size=500)]
    correct = [bool(u < 0.8 * c) for u, c in zip(rng.uniform(size=500), conf)]
    expected = plain_ece(conf, correct)
    assert len(conf) == 500 and 0.05 < expected < 0.5
    assert ece(conf, correct) == pytest.approx(expected, abs=1e-12)


def test_ece_rejects_bad_input():
    with pytest.raises(ValueError):
        ece([0.5, 0.6], [True])
    with pytest.raises(ValueError):
        ece([], [])
    with pytest.raises(ValueError):
        ece([1.2], [True])
