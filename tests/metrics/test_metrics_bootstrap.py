"""The cluster bootstrap: count matrices, known-answer intervals, ECE resamples and determinism."""

from collections import Counter

import numpy as np
import pytest

from laya_robustness.metrics.bootstrap import (
    cluster_index,
    ece_resamples,
    mean_ci,
    mean_resamples,
    percentile_ci,
    resample_counts,
)
from laya_robustness.metrics.calibration import ece
from laya_robustness.rng import keyed_rng
from laya_robustness.summary import summarize

from helpers.records import record


def test_counts_draw_every_cluster_count_with_replacement():
    m = resample_counts(0, "text", "vsr", 7, 1000)
    assert m.shape == (1000, 7)
    assert (m.sum(axis=1) == 7).all() and m.min() >= 0
    assert (m.max(axis=1) > 1).any()  # with replacement


def test_counts_are_keyed_by_seed_family_and_dataset():
    a = resample_counts(3, "text", "vsr", 20, 50)
    assert np.array_equal(a, resample_counts(3, "text", "vsr", 20, 50))
    assert not np.array_equal(a, resample_counts(4, "text", "vsr", 20, 50))
    assert not np.array_equal(a, resample_counts(3, "image", "vsr", 20, 50))
    assert not np.array_equal(a, resample_counts(3, "text", "aokvqa", 20, 50))


def test_two_clusters_resample_distribution_is_enumerable():
    m = resample_counts(0, "text", "d", 2, 4000)
    freq = Counter(map(tuple, m.tolist()))
    assert set(freq) <= {(2, 0), (1, 1), (0, 2)}
    assert freq[(2, 0)] / 4000 == pytest.approx(0.25, abs=0.03)
    assert freq[(1, 1)] / 4000 == pytest.approx(0.50, abs=0.03)
    # cluster 0 holds two right groups, cluster 1 one wrong group: resamples are 1, 2/3 or 0
    stats = mean_resamples(m, [0, 0, 1], [1.0, 1.0, 0.0])
    assert set(np.round(stats, 9)) <= {1.0, round(2 / 3, 9), 0.0}
    assert stats.mean() == pytest.approx(0.25 * 1 + 0.5 * 2 / 3, abs=0.02)  # group-weighted, not 0.5
    assert mean_ci(m[:1000], [0, 0, 1], [1.0, 1.0, 0.0]) == [0.0, 1.0]


def test_equal_cluster_accuracy_gives_a_zero_width_interval():
    # groups' mean correctness; every cluster's group-mean average is 0.75
    ids = [0, 0, 1, 2, 2, 2]
    values = [1.0, 0.5, 0.75, 1.0, 1.0, 0.25]
    m = resample_counts(0, "text", "d", 3, 1000)
    lo, hi = mean_ci(m, ids, values)
    assert lo == pytest.approx(0.75) and hi == pytest.approx(0.75)
    lo, hi = mean_ci(m, ids, [1.0, 0.0, 0.75, 1.0, 1.0, 0.25])  # cluster 0 now averages 0.5
    assert hi - lo > 0.05


def test_percentile_ci_ignores_undefined_resamples():
    assert percentile_ci([np.nan, np.nan]) is None
    assert percentile_ci([np.nan] + list(range(101))) == pytest.approx([2.5, 97.5])


def test_ece_resamples_match_expanded_rows():
    rng = keyed_rng(0, "test", "ece-bootstrap")
    ids = rng.integers(0, 6, size=60)
    conf = rng.uniform(0.3, 1.0, size=60)
    correct = rng.uniform(size=60) < conf
    m = resample_counts(1, "image", "d", 6, 5)
    got = ece_resamples(np.vstack([np.ones((1, 6), dtype=int), m]), ids, conf, correct)
    assert got[0] == pytest.approx(ece(conf, correct))
    for b, row in enumerate(m, start=1):
        take = np.concatenate([np.flatnonzero(ids == c).repeat(n) for c, n in enumerate(row)])
        assert take.size > 0
        assert got[b] == pytest.approx(ece(conf[take], correct[take]))


def test_cluster_index_is_sorted():
    assert cluster_index(["b", "a", "b", "c"]) == {"a": 0, "b": 1, "c": 2}


def records(family, dataset="d", n_groups=12, shift=0, clusters=2):
    out = []
    for g in range(n_groups):
        argmax = keyed_rng(0, "test-records", dataset, g, shift).uniform() < 0.6
        out.append(record(f"g{g}", family, "orig" if family == "orig" else "v", cluster=f"c{g // clusters}",
                          dataset=dataset, primitive="choice", label=1, logits=[0.0, 1.0], probs=[0.3, 0.7],
                          argmax=int(argmax)))
    return out


def test_delta_interval_of_a_family_identical_to_orig_is_zero():
    summary = summarize(records("orig") + records("text"), n_boot=200, n_boot_ece=50)
    cell = summary["families"]["text"]["d"]
    right = sum(r["argmax"] == r["label"] for r in records("orig"))
    assert 0 < right < 12
    assert cell["acc"] == pytest.approx(right / 12, abs=1e-6) and cell["acc_ci"][1] > cell["acc_ci"][0]
    assert cell["delta"] == 0.0 and cell["delta_ci"] == [0.0, 0.0]
    assert cell["flip"] == 0.0


def test_bootstrap_is_deterministic_in_the_seed():
    recs = records("orig", n_groups=60, clusters=3) + records("text", n_groups=60, shift=1, clusters=3)
    a = summarize(recs, seed=5, n_boot=300, n_boot_ece=50)["families"]["text"]["d"]
    b = summarize(recs, seed=5, n_boot=300, n_boot_ece=50)["families"]["text"]["d"]
    c = summarize(recs, seed=6, n_boot=300, n_boot_ece=50)["families"]["text"]["d"]
    assert a["delta_ci"][0] < a["delta"] < a["delta_ci"][1]
    assert a == b
    assert (a["acc_ci"], a["delta_ci"]) != (c["acc_ci"], c["delta_ci"])
