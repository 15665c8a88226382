"""Mutual information: the plug-in forms against scikit-learn and the entropy identity, the chance adjustment against
scikit-learn's expected mutual information, and the conditional MI ratio on synthetic data whose true MI and CMI are
known, at the study's 240 samples per set and at 7,600."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laya_robustness.metrics.information import (adjusted_conditional_mutual_information,
                                                 adjusted_mutual_information, auto_levels, cmi_ratio,
                                                 conditional_mutual_information, discretize, mutual_information)

# -- a synthetic study whose answer: confidence level z, visual entropy level x, textual entropy level y ---------
#    p(z, x, y) = p(z) p(x | z) p(y | x, z): both entropies follow the confidence, and y also follows x directly
P_Z = (0.3, 0.4, 0.3)
P_X_GIVEN_Z = ((0.7, 0.2, 0.1), (0.3, 0.4, 0.3), (0.1, 0.2, 0.7))
DIRECT = 0.8  # the strength of the direct link x -> y
H_V_VALUES, H_T_VALUES, CONF_VALUES = (0.0, 0.35, 0.69), (0.0, 0.5, 1.1), (0.97, 0.8, 0.55)


def joint() -> list[list[list[float]]]:
    """p[z][x][y]."""
    p = []
    for z in range(3):
        p.append([])
        for x in range(3):
            w = [P_X_GIVEN_Z[z][y] * math.exp(DIRECT * (y == x)) for y in range(3)]
            p[z].append([P_Z[z] * P_X_GIVEN_Z[z][x] * wy / sum(w) for wy in w])
    return p


def _mi_of(table) -> float:
    total = sum(map(sum, table))
    px = [sum(row) / total for row in table]
    py = [sum(table[x][y] for x in range(len(table))) / total for y in range(len(table[0]))]
    return sum(v / total * math.log(v / total / (px[x] * py[y]))
               for x, row in enumerate(table) for y, v in enumerate(row) if v > 0)


def true_values() -> tuple[float, float]:
    """The exact I(X; Y) and I(X; Y | Z) of :func:`joint`, in plain loops."""
    p = joint()
    marginal = [[sum(p[z][x][y] for z in range(3)) for y in range(3)] for x in range(3)]
    cmi = sum(sum(map(sum, p[z])) * _mi_of(p[z]) for z in range(3))
    return _mi_of(marginal), cmi


def draw(n: int, seed: int) -> tuple[list[float], list[float], list[float]]:
    p = np.array(joint()).ravel()
    z, x, y = np.unravel_index(np.random.default_rng(seed).choice(27, size=n, p=p / p.sum()), (3, 3, 3))
    return ([H_V_VALUES[i] for i in x], [H_T_VALUES[i] for i in y], [CONF_VALUES[i] for i in z])


def test_the_synthetic_truth_has_a_quarter_of_the_dependence_left_given_the_confidence():
    mi, cmi = true_values()
    assert mi == pytest.approx(0.17284, abs=1e-5) and cmi == pytest.approx(0.05733, abs=1e-5)
    assert 0.3 < cmi / mi < 0.35  # the study reports 0.276


@pytest.mark.parametrize("n, seed", [(240, 1), (240, 2), (7600, 3)])
def test_the_ratio_recovers_the_known_values_within_its_intervals(n, seed):
    mi, cmi = true_values()
    out = cmi_ratio(*draw(n, seed), seed=seed, keys=("synthetic",))
    assert out["readable"] is True and out["unreadable"] is None
    assert out["levels"] == auto_levels(n) and out["n_samples"] == n
    for key, truth in (("mi", mi), ("cmi", cmi), ("ratio", cmi / mi)):
        lo, hi = out[f"{key}_ci"]
        assert lo <= truth <= hi, (key, truth, out)
    lo, hi = out["ratio_ci"]
    assert hi - lo < (0.9 if n == 240 else 0.1)  # 7,600 samples pin it down


def test_the_intervals_cover_the_truth_at_240_samples_and_the_estimate_is_unbiased():
    mi, cmi = true_values()
    runs = [cmi_ratio(*draw(240, 100 + s), n_boot=200, seed=s) for s in range(40)]
    covered = [r["ratio_ci"] is not None and r["ratio_ci"][0] <= cmi / mi <= r["ratio_ci"][1] for r in runs]
    assert sum(covered) >= 35  # a 95% interval: 38 expected of 40
    assert sum(r["mi_ci"][0] <= mi <= r["mi_ci"][1] for r in runs) >= 35
    # the adjusted estimates centre on the truth; the plug-in ones sit above it
    assert np.mean([r["cmi"] for r in runs]) == pytest.approx(cmi, abs=0.01)
    assert np.mean([r["mi"] for r in runs]) == pytest.approx(mi, abs=0.01)
    assert np.mean([r["plugin"]["cmi"] for r in runs]) > cmi + 0.015


def test_the_ratio_says_when_it_cannot_be_read():
    rng = np.random.default_rng(5)
    independent = (list(rng.integers(0, 3, 240) / 2), list(rng.integers(0, 3, 240) / 2), list(rng.random(240)))
    out = cmi_ratio(*independent, seed=0)
    assert out["readable"] is False and out["ratio_ci"] is None
    assert "I(H_V; H_T) is not distinguishable from 0 on 240 samples" in out["unreadable"]
    assert out["mi_ci"][0] <= 0.0 <= out["mi_ci"][1]
    # the study's 10 bins on 240 samples: 8,000 would be needed for 8 per cell
    ten = cmi_ratio(*draw(240, 1), levels=10, seed=0)
    assert ten["readable"] is False and ten["mi_ci"] is None
    assert ten["unreadable"].startswith("240 samples are too few for 10 levels per variable")
    continuous = np.random.default_rng(6).random((3, 240))
    assert cmi_ratio(*continuous, levels=10, seed=0)["plugin"]["cmi"] > 1.0  # the plug-in's bias at 10 bins


def test_the_ratio_is_a_function_of_the_data_seed_and_keys():
    data = draw(240, 1)
    assert cmi_ratio(*data, seed=0, keys=("a",)) == cmi_ratio(*data, seed=0, keys=("a",))
    other = cmi_ratio(*data, seed=0, keys=("b",))
    assert other["mi"] == cmi_ratio(*data, seed=0, keys=("a",))["mi"]  # the point estimate draws nothing
    assert other["mi_ci"] != cmi_ratio(*data, seed=0, keys=("a",))["mi_ci"]


def test_the_ratio_is_zero_when_the_confidence_explains_the_dependence_and_none_without_dependence():
    h = [0.0] * 30 + [0.5] * 30 + [1.0] * 30
    out = cmi_ratio(h, h, h, levels=3, seed=0, n_boot=50)
    assert out["ratio"] == 0.0 and out["cmi"] == 0.0 and out["plugin"]["mi"] == pytest.approx(math.log(3))
    const = cmi_ratio([0.0] * 90, [0.0, 1.0] * 45, list(np.linspace(0, 1, 90)), levels=2, seed=0, n_boot=50)
    assert const["mi"] == 0.0 and const["ratio"] is None and const["readable"] is False


# -- the estimators against independent references ---------------------------------------------------------------


def test_mutual_information_against_scikit_learn():
    from sklearn.metrics import mutual_info_score

    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.integers(0, 4, 200)
        y = (x + rng.integers(0, 3, 200)) % 5
        assert mutual_information(x, y) == pytest.approx(mutual_info_score(x, y), abs=1e-12)


def _sklearn_adjusted(x, y) -> float:
    from sklearn.metrics import mutual_info_score
    from sklearn.metrics.cluster import contingency_matrix
    from sklearn.metrics.cluster._expected_mutual_info_fast import expected_mutual_information

    return mutual_info_score(x, y) - expected_mutual_information(contingency_matrix(x, y, sparse=True), len(x))


def test_the_adjustment_is_scikit_learn_s_expected_mutual_information():
    rng = np.random.default_rng(2)
    for n in (7, 40, 240, 3000):
        x, y = rng.integers(0, 4, n), rng.integers(0, 3, n)
        y = np.where(rng.random(n) < 0.3, x % 3, y)
        assert adjusted_mutual_information(x, y) == pytest.approx(_sklearn_adjusted(x, y), abs=1e-10)


def _plain_entropy(*columns) -> float:
    counts: dict = {}
    for key in zip(*columns):
        counts[key] = counts.get(key, 0) + 1
    n = len(columns[0])
    return -sum(c / n * math.log(c / n) for c in counts.values())


def test_conditional_mutual_information_against_the_entropy_identity_and_its_adjustment_per_stratum():
    # I(X;Y|Z) = H(X,Z) + H(Y,Z) - H(X,Y,Z) - H(Z), each entropy counted in a plain loop
    rng = np.random.default_rng(2)
    for _ in range(10):
        z = rng.integers(0, 3, 300)
        x, y = (z + rng.integers(0, 2, 300)) % 4, (z + rng.integers(0, 3, 300)) % 4
        expected = _plain_entropy(x, z) + _plain_entropy(y, z) - _plain_entropy(x, y, z) - _plain_entropy(z)
        assert conditional_mutual_information(x, y, z) == pytest.approx(expected, abs=1e-12)
        adjusted = sum((z == k).mean() * _sklearn_adjusted(x[z == k], y[z == k]) for k in range(3))
        assert adjusted_conditional_mutual_information(x, y, z) == pytest.approx(adjusted, abs=1e-10)


def test_the_adjustment_removes_the_bias_under_independence():
    rng = np.random.default_rng(3)
    plug, adjusted = [], []
    for _ in range(200):
        x, y = rng.integers(0, 4, 60), rng.integers(0, 4, 60)
        plug.append(mutual_information(x, y))
        adjusted.append(adjusted_mutual_information(x, y))
    assert np.mean(plug) > 0.06  # about (4 - 1)(4 - 1) / 2n = 0.075
    assert abs(np.mean(adjusted)) < 0.005


# -- levels ---------------------------------------------------------------------------------------------------------


def test_auto_levels_keep_eight_samples_per_cell():
    assert [auto_levels(n) for n in (10, 64, 215, 216, 240, 7600, 8000, 10 ** 6)] == [2, 2, 2, 3, 3, 9, 10, 10]


def test_a_variable_with_few_values_keeps_them_as_its_levels():
    assert discretize([0.69, 0.0, 0.35, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 3).tolist() == [2, 0, 1, 0, 0, 0, 0, 0, 0]
    assert discretize([2.0, 2.0], 5, "width").tolist() == [0, 0]


def test_quantile_bins_never_split_ties_and_fill_evenly():
    x = [0.0] * 7 + list(np.linspace(0.1, 1.0, 13))
    bins = discretize(x, 5)
    assert len(set(bins[:7])) == 1 and bins[0] == 0
    values = np.random.default_rng(4).normal(size=1000)
    assert np.bincount(discretize(values, 10)).tolist() == [100] * 10
    tied = [1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 5.0]
    assert discretize(tied, 4).tolist()[1:4] == [discretize(tied, 4)[1]] * 3


def test_width_bins_are_equal_intervals_of_the_range():
    assert discretize([0.0, 0.19, 0.2, 0.5, 0.99, 1.0, 0.7], 5, "width").tolist() == [0, 0, 1, 2, 4, 4, 3]
    with pytest.raises(ValueError, match="binning must be one of quantile, width"):
        discretize([1.0], 2, "log")
    with pytest.raises(ValueError, match="n_bins must be an int >= 1"):
        discretize([1.0], 0)
