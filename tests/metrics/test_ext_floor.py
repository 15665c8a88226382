"""The ECE noise floor: plain and clustered redraws of correctness under perfect calibration."""

from __future__ import annotations

import numpy as np
import pytest

from laya_robustness.metrics.calibration import ece
from laya_robustness.metrics.floor import ece_floor, floor_block
from laya_robustness.rng import keyed_rng

KEYS = {"floor_mean", "floor_p95", "clustered_mean", "clustered_p95"}


def calibrated(n: int, seed: int = 0) -> tuple[list[float], list[bool]]:
    """n confidences in [0.5, 1) and correctness drawn as Bernoulli(confidence): calibrated by construction."""
    rng = keyed_rng(seed, "test_floor", n)
    conf = rng.uniform(0.5, 1.0, n)
    return conf.tolist(), (rng.random(n) < conf).tolist()


def singletons(n: int) -> list[str]:
    return [f"c{i}" for i in range(n)]


def test_floor_is_positive_and_shrinks_with_n():
    floors = {}
    for n in (50, 200, 1000):
        conf, _ = calibrated(n)
        out = ece_floor(conf, singletons(n), sims=100, seed=0)
        assert set(out) == KEYS
        assert 0 < out["floor_mean"] <= out["floor_p95"] < 1
        floors[n] = out["floor_mean"]
    assert floors[50] > floors[200] > floors[1000]
    assert floors[50] > 2 * floors[1000]


def test_calibrated_ece_sits_near_its_floor():
    conf, correct = calibrated(400, seed=3)
    out = ece_floor(conf, singletons(400), sims=200, seed=0)
    assert ece(conf, correct) < out["floor_p95"] * 1.5


def test_singleton_clusters_give_the_same_distribution():
    conf, _ = calibrated(300)
    out = ece_floor(conf, singletons(300), sims=200, seed=0)
    assert out["clustered_mean"] == pytest.approx(out["floor_mean"], rel=0.2)


def test_clustered_floor_is_higher_on_strongly_clustered_data():
    conf, _ = calibrated(300)
    clusters = [f"img{i // 30}" for i in range(300)]  # 10 images, 30 questions each
    out = ece_floor(conf, clusters, sims=200, seed=0)
    assert out["clustered_mean"] >= out["floor_p95"]
    assert out["clustered_p95"] > out["floor_p95"]


def test_deterministic_with_the_seed_and_key():
    conf, _ = calibrated(120)
    clusters = [f"img{i % 17}" for i in range(120)]
    first = ece_floor(conf, clusters, sims=50, seed=1, key=("text", "d"))
    assert first == ece_floor(conf, clusters, sims=50, seed=1, key=("text", "d"))
    assert first != ece_floor(conf, clusters, sims=50, seed=2, key=("text", "d"))
    assert first != ece_floor(conf, clusters, sims=50, seed=1, key=("image", "d"))
    order = keyed_rng(0, "perm").permutation(120)
    shuffled = ece_floor([conf[i] for i in order], [clusters[i] for i in order], sims=50, seed=1, key=("text", "d"))
    assert shuffled == first


@pytest.mark.parametrize(
    "conf, clusters, sims",
    [([], [], 10), ([0.5, 1.2], ["a", "b"], 10), ([0.5, 0.6], ["a"], 10), ([0.5], ["a"], 0)],
)
def test_invalid_input(conf, clusters, sims):
    with pytest.raises(ValueError):
        ece_floor(conf, clusters, sims=sims)


def _records(family: str, dataset: str, n: int, seed: int) -> list[dict]:
    conf, correct = calibrated(n, seed)
    out = []
    for i, (c, ok) in enumerate(zip(conf, correct, strict=True)):
        label = 0 if ok else 1
        out.append({
            "row_id": f"{dataset}/{i}|{family}", "group_id": f"{dataset}/{i}", "cluster": f"{dataset}/img{i // 3}",
            "dataset": dataset, "family": family, "variant": family, "primitive": "noul",
            "label": label, "logits": [0.0, 0.0], "probs": [c, 1 - c], "argmax": 0, "meta": {},
        })
    return out


def test_floor_block():
    recs = _records("orig", "a", 90, 1) + _records("orig", "b", 60, 2) + _records("text", "a", 90, 3)
    unscored = dict(recs[0], row_id="a/x|orig", label=-1, probs=[0.99, 0.01])
    block = floor_block([*recs, unscored], sims=50, seed=0)
    assert {f: sorted(d) for f, d in block.items()} == {"orig": ["a", "b"], "text": ["a"]}
    assert block == floor_block(list(reversed(recs)), sims=50, seed=0)  # label -1 left out; order-free
    cell = block["orig"]["a"]
    assert set(cell) == KEYS | {"ece", "ratio"}
    rows = [r for r in recs if r["family"] == "orig" and r["dataset"] == "a"]
    expected = ece([r["probs"][0] for r in rows], [r["argmax"] == r["label"] for r in rows])
    assert cell["ece"] == pytest.approx(expected, abs=1e-6)
    assert cell["ratio"] == pytest.approx(cell["ece"] / cell["floor_mean"], abs=1e-5)
    assert all(v == round(v, 6) for d in block.values() for c in d.values() for v in c.values())
    assert cell["floor_mean"] > 0 and cell != block["text"]["a"]


def test_floor_block_seed():
    recs = _records("orig", "a", 60, 1)
    assert floor_block(recs, sims=30, seed=0) == floor_block(recs, sims=30, seed=0)
    assert floor_block(recs, sims=30, seed=0) != floor_block(recs, sims=30, seed=1)
