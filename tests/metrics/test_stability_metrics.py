"""Stability metrics: AV, V and the block cells against hand-computed examples and plain-loop recomputations."""

from __future__ import annotations

from collections import defaultdict

import dataclasses

import numpy as np
import pytest

from laya_robustness.families import any_families, build_variants, get_family
from laya_robustness.recipes.fixture_rows import generate_rows
from laya_robustness.metrics.headline import headline_values
from laya_robustness.metrics.stability import (
    AV,
    V,
    any_visual_cell,
    changed,
    is_right,
    overlay_cell,
    rotation_cell,
    stability_cell,
    truth_of,
)
from laya_robustness.run.pipeline.chunks import open_record, prediction_record
from laya_robustness.rows import Row
from laya_robustness.summary import summarize

from helpers.fakes import OracleScorer
from helpers.summaries import summary_cell

TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}


def rec(group, variant="orig", argmax=1, label=1, cluster=None, primitive="noul", family=None, **kw):
    family = family or ("orig" if variant == "orig" else "shift")
    return {"row_id": f"{group}|{family}|{variant}", "dataset": "d", "group_id": group,
            "cluster": cluster or f"c-{group}", "family": family, "variant": variant, "primitive": primitive,
            "label": label, "argmax": argmax, "meta": kw.pop("meta", {}), **kw}


def origs(*records):
    return {("d", r["group_id"]): r for r in records}


# Three samples, two image clusters (g1 and g2 share one). Hand count:
#   g1: a changed, b same      g2: a same, b same      g3: a changed, b changed
#   AV = 3 changed / 6 paired = 0.5;  V = 2 of 3 samples changed at least once
O = origs(rec("g1", cluster="c1"), rec("g2", cluster="c1", argmax=0, label=0), rec("g3", cluster="c2"))
ROWS = [rec("g1", "a", argmax=0, cluster="c1"), rec("g1", "b", cluster="c1"),
        rec("g2", "a", argmax=0, label=0, cluster="c1"), rec("g2", "b", argmax=0, label=0, cluster="c1"),
        rec("g3", "a", argmax=0, cluster="c2"), rec("g3", "b", argmax=0, cluster="c2"),
        rec("g4", "a", argmax=0, cluster="c3")]  # no orig row: left out


def test_av_and_v_by_hand():
    assert headline_values((AV, V), ROWS, O) == {"av": 0.5, "n_paired": 6, "v": pytest.approx(2 / 3), "n_samples": 3}
    assert AV.units(ROWS, O) == [("c1", 1.0), ("c1", 0.0), ("c1", 0.0), ("c1", 0.0), ("c2", 1.0), ("c2", 1.0)]
    assert sorted(V.units(ROWS, O)) == [("c1", 0.0), ("c1", 1.0), ("c2", 1.0)]


def test_av_is_pooled_over_rows_not_group_weighted():
    # g1 has four variants (one changed), g2 one (changed): pooled 2/5, a group-weighted mean would be 0.625
    o = origs(rec("g1"), rec("g2"))
    rows = [rec("g1", v, argmax=int(v != "a")) for v in "abcd"] + [rec("g2", "a", argmax=0)]
    assert headline_values((AV,), rows, o)["av"] == pytest.approx(2 / 5)


def test_open_rows_change_when_the_normalised_answer_changes():
    row = Row(row_id="d/g1", dataset="d", group_id="d/g1", cluster="c", images=(), question="What animal is it?",
              options=(), label=-1, primitive="open", answers=("cat", "a kitten"))

    def variant(name, generated):
        return open_record(dataclasses.replace(row, row_id=f"d/g1|shift|{name}", family="shift", variant=name), generated)

    o, same, other = open_record(row, "The Cat."), variant("a", " cat"), variant("b", "a dog")
    assert not changed(same, o) and changed(other, o)
    assert is_right(o) and is_right(same) and not is_right(other)
    assert is_right(rec("g", label=-1)) is None
    assert headline_values((AV, V), [same, other], origs(o)) == {"av": 0.5, "n_paired": 2, "v": 1.0, "n_samples": 1}
    assert stability_cell([same, other], origs(o))["acc"] == 0.5 and truth_of(o) == "open"


def test_stability_cell_by_hand():
    cell = stability_cell(ROWS, O)
    # accuracy: g1 1/2, g2 2/2, g3 0/2, g4 0/1 -> (0.5 + 1 + 0 + 0) / 4; orig of g1..g3 all right
    assert cell["n_rows"] == 7 and cell["n_groups"] == 4
    assert cell["acc"] == pytest.approx(1.5 / 4) and cell["orig_acc"] == 1.0
    assert cell["variants"] == {
        "a": {"n_rows": 4, "n_paired": 3, "av": pytest.approx(2 / 3), "acc": 0.25},
        "b": {"n_rows": 3, "n_paired": 3, "av": pytest.approx(1 / 3), "acc": pytest.approx(2 / 3)},
    }


def test_overlay_cell_breaks_accuracy_down_by_ground_truth_and_text():
    o = origs(rec("y1", label=1, argmax=1), rec("y2", label=1, argmax=0), rec("n1", label=0, argmax=0),
              rec("c1", primitive="choice", label=2, argmax=2))
    rows = [rec("y1", "answer_no", label=1, argmax=0), rec("y2", "answer_no", label=1, argmax=0),
            rec("y1", "answer_yes", label=1, argmax=1), rec("y2", "answer_yes", label=1, argmax=1),
            rec("n1", "answer_no", label=0, argmax=0), rec("n1", "answer_yes", label=0, argmax=1),
            rec("c1", "answer_yes", primitive="choice", label=2, argmax=0)]
    by_truth = overlay_cell(rows, o)["by_truth"]
    assert by_truth == {
        "C": {"n_groups": 1, "orig_acc": 1.0, "variants": {"answer_yes": {"n_rows": 1, "acc": 0.0}}},
        "no": {"n_groups": 1, "orig_acc": 1.0, "variants": {"answer_no": {"n_rows": 1, "acc": 1.0},
                                                           "answer_yes": {"n_rows": 1, "acc": 0.0}}},
        "yes": {"n_groups": 2, "orig_acc": 0.5, "variants": {"answer_no": {"n_rows": 2, "acc": 0.0},
                                                            "answer_yes": {"n_rows": 2, "acc": 1.0}}},
    }
    assert [truth_of(r) for r in (o[("d", "y1")], o[("d", "n1")], o[("d", "c1")])] == ["yes", "no", "C"]


def test_rotation_cell_splits_variant_and_invariant_questions_per_angle():
    def rot(group, angle, argmax, variant_q):
        return rec(group, f"rot{angle}", argmax=argmax, meta={"rotation_variant": variant_q, "image_op": {"angle": angle}})

    o = origs(rec("v1"), rec("i1"), rec("i2"))
    rows = [rot("v1", 90, 0, True), rot("v1", 180, 0, True), rot("i1", 90, 1, False), rot("i1", 180, 0, False),
            rot("i2", 90, 1, False), rot("i2", 180, 1, False)]
    split = rotation_cell(rows, o)["by_question"]
    assert split["variant"] == {"av": 1.0, "n_paired": 2, "v": 1.0, "n_samples": 1, "angles": {
        "rot90": {"angle": 90.0, "n_paired": 1, "av": 1.0}, "rot180": {"angle": 180.0, "n_paired": 1, "av": 1.0}}}
    assert split["invariant"]["av"] == 0.25 and split["invariant"]["v"] == 0.5
    assert split["invariant"]["angles"]["rot180"] == {"angle": 180.0, "n_paired": 2, "av": 0.5}
    assert list(split["invariant"]["angles"]) == ["rot90", "rot180"], "angles in numeric order"
    with pytest.raises(ValueError, match="rotation_variant"):
        rotation_cell([rec("i1", "rot90", meta={"image_op": {"angle": 90}})], o)


def test_the_any_row_pools_every_visual_family():
    o = origs(rec("g1"), rec("g2"), rec("g3"))
    rows = [rec("g1", "a", family="shift"), rec("g1", "b", family="overlay", argmax=0),
            rec("g2", "a", family="shift", argmax=0), rec("g2", "b", family="overlay"),
            rec("g3", "a", family="shift"), rec("g3", "b", family="overlay")]
    cell = any_visual_cell(rows, o)
    assert (cell["av"], cell["n_paired"], cell["v"], cell["n_samples"]) == (pytest.approx(2 / 6), 6, pytest.approx(2 / 3), 3)
    assert cell["families"]["shift"]["v"] == pytest.approx(1 / 3) and cell["families"]["overlay"]["av"] == pytest.approx(1 / 3)
    assert any_families() == ("shift", "pad_crop", "scale", "scale_pad", "rotation", "overlay")


# --- recomputed from scored records, on rows where every variant fires -------------------------

@pytest.fixture(scope="module")
def records():
    scorer = OracleScorer("fake", margin=1.0, noise=1.0)
    out = []
    for name in ("exists_yesno", "colour_choice"):
        rows = generate_rows(name, 16, seed=5)
        for family in ("orig", "shift", "pad_crop", "scale", "scale_pad", "rotation", "overlay", "rephrase", "language"):
            variants = build_variants(family, rows, seed=0)
            out += [prediction_record(r, lg, TEMPERATURES) for r, lg in zip(variants, scorer.score_batch(variants))]
    return out


def test_the_stability_block_holds_each_family_with_its_headlines_and_variants(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    orig = {(r["dataset"], r["group_id"]): r for r in records if r["family"] == "orig"}
    assert set(summary["stability"]) == {"shift", "pad_crop", "scale", "scale_pad", "rotation", "overlay",
                                         "rephrase", "language", "any"}  # "any": the visual families pooled
    for family, cells in summary["stability"].items():
        if family == "any":
            continue
        for dataset, cell in cells.items():
            rows = [r for r in records if r["family"] == family and r["dataset"] == dataset]
            per_variant = defaultdict(list)
            for r in rows:
                per_variant[r["variant"]].append(r["argmax"] != orig[(dataset, r["group_id"])]["argmax"])
            assert set(cell["variants"]) == set(per_variant)
            assert all(get_family(family).knows_variant(v) for v in per_variant)
            if get_family(family).modality == "visual":
                assert set(per_variant) == set(get_family(family).variants)
            for variant, flags in per_variant.items():
                assert cell["variants"][variant]["av"] == pytest.approx(sum(flags) / len(flags), abs=1e-6)
            assert cell["av"] == pytest.approx(sum(map(sum, per_variant.values())) / len(rows), abs=1e-6)
            assert 0 < cell["av"] < 1, (family, dataset, "the fake scorer's noise moves some answers, not all")
            for key in ("av", "v"):  # the summary adds each headline's interval and standard error
                lo, hi = cell[f"{key}_ci"]
                assert lo <= cell[key] <= hi and cell[f"{key}_se"] >= 0
            assert cell["av_se"] > 0
            assert summary_cell(summary, family, dataset) is cell


def test_table_4_and_the_any_row_recomputed(records):
    orig = {(r["dataset"], r["group_id"]): r for r in records if r["family"] == "orig"}
    for dataset in ("exists_yesno", "colour_choice"):
        overlays = [r for r in records if r["family"] == "overlay" and r["dataset"] == dataset]
        table = overlay_cell(overlays, orig)["by_truth"]
        for truth, row in table.items():
            groups = [g for g, o in orig.items() if g[0] == dataset and truth_of(o) == truth]
            assert row["orig_acc"] == pytest.approx(np.mean([orig[g]["argmax"] == orig[g]["label"] for g in groups]))
            for variant, stats in row["variants"].items():
                hits = [r["argmax"] == r["label"] for r in overlays
                        if r["variant"] == variant and (dataset, r["group_id"]) in groups]
                assert stats["acc"] == pytest.approx(np.mean(hits)) and stats["n_rows"] == len(hits)
        visual = [r for r in records if r["dataset"] == dataset and r["family"] in any_families()]
        cell = any_visual_cell(visual, orig)
        moved = defaultdict(bool)
        for r in visual:
            moved[r["group_id"]] |= r["argmax"] != orig[(dataset, r["group_id"])]["argmax"]
        assert cell["n_paired"] == len(visual) == 27 * 16
        assert cell["v"] == pytest.approx(np.mean(list(moved.values())))
        assert cell["av"] == pytest.approx(np.mean([r["argmax"] != orig[(dataset, r["group_id"])]["argmax"] for r in visual]))
