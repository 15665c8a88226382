"""LGIP metrics against hand-computed examples and a plain-loop bootstrap; the table layout."""

import re

import numpy as np
import pytest

from laya_robustness.metrics.bootstrap import resample_counts
from laya_robustness.metrics.lgip import format_lgip_table, lgip_cell, lgip_pairs


def rec(family, group, cluster, s, variant="orig", **meta):
    return {"row_id": f"{group}|{family}|{variant}", "family": family, "variant": variant, "group_id": group,
            "cluster": cluster, "dataset": "d", "logits": [s], "label": -1, "meta": meta}


ORIG = [rec("orig", "g1", "i1", 0.50), rec("orig", "g2", "i1", 0.40), rec("orig", "g3", "i2", 0.30)]
FLIPS = [
    rec("lgip_flip", "g1", "i1", 0.45, "colour_weak", attribute="colour", strength="weak"),  # +0.05, positive
    rec("lgip_flip", "g1", "i1", 0.55, "count_strong", attribute="count", strength="strong"),  # -0.05
    rec("lgip_flip", "g2", "i1", 0.10, "colour_strong", attribute="colour", strength="strong"),  # +0.30, positive
    rec("lgip_flip", "g3", "i2", 0.30, "object_weak", attribute="object", strength="weak"),  # 0: a tie
]
PARAPHRASES = [
    rec("lgip_paraphrase", "g1", "i1", 0.45, "photo_of", rule="photo_of", kind="wrapper"),  # 0.05
    rec("lgip_paraphrase", "g1", "i1", 0.60, "synonym", rule="synonym", kind="rewrite"),  # 0.10
    rec("lgip_paraphrase", "g3", "i2", 0.30, "user_0", rule="user_0", kind="user"),  # 0
]


def loop_ci(pairs_by_cluster, family, n_boot=200, seed=0):
    """The bootstrap interval by a plain loop: resample clusters, pool their values, take the mean."""
    names = sorted(pairs_by_cluster)
    counts = resample_counts(seed, family, "d", len(names), n_boot)
    means = []
    for b in range(n_boot):
        pooled = [v for c, name in enumerate(names) for _ in range(counts[b, c]) for v in pairs_by_cluster[name]]
        means.append(np.mean(pooled) if pooled else np.nan)
    means = np.asarray(means)
    return list(np.percentile(means[np.isfinite(means)], [2.5, 97.5]))


def test_flip_cell_by_hand():
    cell = lgip_cell(ORIG + FLIPS, seed=0, n_boot=200)
    assert (cell["family"], cell["dataset"], cell["n_clusters"], cell["n_groups"]) == ("lgip_flip", "d", 2, 3)
    assert cell["invariance"] is None
    sens = cell["sensitivity"]
    assert (sens["n_pairs"], sens["n_groups"]) == (4, 3)
    assert sens["e_sens"] == pytest.approx(0.075) and sens["pr"] == 0.5
    colour = sens["by_attribute"]["colour"]
    assert (colour["n_pairs"], colour["e_sens"], colour["pr"]) == (2, pytest.approx(0.175), 1.0)
    assert list(sens["by_attribute"]) == ["object", "colour", "count"]
    assert sens["by_attribute"]["count"]["pr"] == 0.0 and sens["by_attribute"]["object"]["pr"] == 0.0
    assert colour["by_strength"]["strong"]["e_sens"] == pytest.approx(0.30)
    assert list(colour["by_strength"]) == ["weak", "strong"]
    diffs = {"i1": [0.05, -0.05, 0.30], "i2": [0.0]}
    assert sens["e_sens_ci"] == pytest.approx(loop_ci(diffs, "lgip_flip"))
    assert sens["pr_ci"] == pytest.approx(loop_ci({"i1": [1, 0, 1], "i2": [0]}, "lgip_flip"))
    assert colour["e_sens_ci"] == pytest.approx(loop_ci({"i1": [0.05, 0.30], "i2": []}, "lgip_flip"))


def test_paraphrase_cell_by_hand():
    cell = lgip_cell(ORIG + PARAPHRASES, seed=0, n_boot=200)
    inv = cell["invariance"]
    assert cell["sensitivity"] is None and (inv["n_pairs"], inv["n_groups"]) == (3, 2)
    assert inv["e_inv"] == pytest.approx(0.05)
    assert {k: round(v["e_inv"], 6) for k, v in inv["by_kind"].items()} == {"wrapper": 0.05, "rewrite": 0.1, "user": 0}
    assert list(inv["by_rule"]) == ["photo_of", "synonym", "user_0"]
    assert inv["e_inv_ci"] == pytest.approx(loop_ci({"i1": [0.05, 0.10], "i2": [0.0]}, "lgip_paraphrase"))


def test_combined_flips_are_judged_against_their_paraphrase():
    combined = [rec("lgip_combined", "g1", "i1", 0.45, "paraphrase", role="paraphrase", rule="photo_of"),
                rec("lgip_combined", "g1", "i1", 0.40, "colour_weak", role="flip", reference="paraphrase",
                    attribute="colour", strength="weak"),
                rec("lgip_combined", "g2", "i1", 0.38, "paraphrase", role="paraphrase", rule="synonym"),
                rec("lgip_combined", "g2", "i1", 0.39, "count_weak", role="flip", reference="paraphrase",
                    attribute="count", strength="weak")]
    cell = lgip_cell(ORIG + combined, seed=0, n_boot=50)
    assert cell["invariance"]["e_inv"] == pytest.approx((0.05 + 0.02) / 2)
    sens = cell["sensitivity"]
    assert sens["e_sens"] == pytest.approx((0.05 - 0.01) / 2) and sens["pr"] == 0.5
    paraphrase_pairs, flip_pairs = lgip_pairs(ORIG + combined)
    assert [p.reference for p in flip_pairs] == [0.45, 0.38] and [p.reference for p in paraphrase_pairs] == [0.5, 0.4]
    with pytest.raises(ValueError, match="variant 'paraphrase' of group g1, is missing"):
        lgip_pairs(ORIG + combined[1:2])


def test_bad_records_are_named():
    with pytest.raises(ValueError, match=r"g9\|lgip_flip\|colour_weak \(d\): its reference, the orig record of group g9, is missing"):
        lgip_pairs(ORIG + [rec("lgip_flip", "g9", "i9", 0.1, "colour_weak", attribute="colour", strength="weak")])
    with pytest.raises(ValueError, match="one family and dataset"):
        lgip_cell(ORIG + FLIPS + PARAPHRASES, 0, 10)
    with pytest.raises(ValueError, match="not a caption record"):
        lgip_cell(ORIG + [dict(FLIPS[0], logits=[0.1, 0.2])], 0, 10)
    with pytest.raises(ValueError, match="lacks field"):
        lgip_cell([{"family": "lgip_flip"}], 0, 10)
    with pytest.raises(ValueError, match="not an LGIP family"):
        lgip_pairs(ORIG + [dict(FLIPS[0], family="text")])
    with pytest.raises(ValueError, match="n_boot"):
        lgip_cell(ORIG + FLIPS, 0, 0)


def test_the_table_has_the_papers_layout():
    cells = [lgip_cell(ORIG + PARAPHRASES, 0, 100), lgip_cell(ORIG + FLIPS, 0, 100)]
    lines = [re.split(r"\s{2,}", line) for line in format_lgip_table(cells).splitlines()]
    assert lines[0] == ["dataset", "family", "probe", "pairs", "E_inv [95% CI]", "E_sens [95% CI]", "PR [95% CI]"]
    assert [line[2] for line in lines[1:]] == [
        "paraphrases", "wrapper", "rewrite", "user", "flips", "object", "object / weak", "colour", "colour / weak",
        "colour / strong", "count", "count / strong"]
    assert lines[1][:4] == ["d", "lgip_paraphrase", "paraphrases", "3"] and lines[1][4].startswith("0.0500 [")
    assert lines[1][5:] == ["-", "-"]
    flips = lines[5]
    assert flips[:5] == ["d", "lgip_flip", "flips", "4", "-"]
    assert flips[5].startswith("0.0750 [") and flips[6].startswith("0.5000 [")
    assert format_lgip_table([]) == "no LGIP cells"
