"""Every headline of every summary block equals a plain recomputation from the records, on rows where
every variant of every family fires (unlike the fixture sets, whose fixed option sets never get a distractor)."""

import dataclasses
from collections import defaultdict

import pytest

from laya_robustness.recipes.fixture_captions import generate_captions
from laya_robustness.families import FLAT, build_variants, declared
from laya_robustness.recipes.fixture_rows import generate_rows
from laya_robustness.run.pipeline.chunks import prediction_record
from laya_robustness.summary import summarize

from helpers.fakes import OracleScorer
from helpers.rows import varied, what_is, with_user_variants
from helpers.summaries import summary_cell

TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}


def _with_user_paraphrases(rows):
    """The first caption carries two paraphrases of its own, as --paraphrases attaches them."""
    first = dataclasses.replace(rows[0], meta={**rows[0].meta, "paraphrases": ["a picture of shapes", "shapes"]})
    return [first, *rows[1:]]


@pytest.fixture(scope="module")
def records():
    rows = [varied(generate_rows("colour_choice", 24, seed=3)), generate_rows("exists_yesno", 24, seed=3)]
    rows = [with_user_variants(r) for r in rows] + [
        # the other question forms, so every rephrasing rule fires
        generate_rows("count_choice", 8, seed=3), generate_rows("left_of_yesno", 8, seed=3),
        what_is(generate_rows("context_choice", 8, seed=3))]
    sources = {"rows": rows, "captions": [_with_user_paraphrases(generate_captions(12, seed=3))]}
    scorer = OracleScorer("fake", margin=1.0, noise=1.0)
    out = []
    for family in declared():
        for rows in (sources["rows"] + sources["captions"] if family.name == "orig" else sources[family.source]):
            variants = build_variants(family.name, rows, seed=0)
            out += [prediction_record(r, lg, TEMPERATURES) for r, lg in zip(variants, scorer.score_batch(variants))]
    return out


def _mean(values):
    values = list(values)
    return sum(values) / len(values) if values else None


def _orig(records):
    return {(r["dataset"], r["group_id"]): r for r in records if r["family"] == "orig"}


def _groups(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["dataset"], r["group_id"])].append(r)
    return groups


def acc(rows):
    per_group = []
    for g in _groups(rows).values():
        scored = [r for r in g if r["label"] >= 0]
        if scored:
            per_group.append(sum(r["argmax"] == r["label"] for r in scored) / len(scored))
    return _mean(per_group)


def flip(rows, orig):
    return _mean(sum(r["argmax"] != orig[g]["argmax"] for r in rs) / len(rs)
                 for g, rs in _groups(rows).items() if g in orig)


def delta(rows, orig):
    out = []
    for g, rs in _groups(rows).items():
        scored = [r for r in rs if r["label"] >= 0]
        if g in orig and scored:
            o = orig[g]
            out.append(sum(r["argmax"] == r["label"] for r in scored) / len(scored) - (o["argmax"] == o["label"]))
    return _mean(out)


def asr(rows, orig):
    hits = [r["argmax"] == r["meta"]["target"] for r in rows
            if (r["dataset"], r["group_id"]) in orig and orig[(r["dataset"], r["group_id"])]["argmax"] != r["meta"]["target"]]
    return _mean(hits)


def label_flip(rows, orig):
    """Pooled over variants: a row whose orig answer is still offered flips when its answer, mapped back, differs."""
    flips = []
    for r in rows:
        o = orig[(r["dataset"], r["group_id"])]
        mapping = r["meta"]["kept"] if r["variant"] == "drop_wrong" else r["meta"]["source_options"]
        if o["argmax"] in mapping:
            flips.append(mapping[r["argmax"]] != o["argmax"])
    return _mean(flips)


def av(rows, orig):
    """Stability AV, pooled over every paired row: the share whose argmax differs from the orig argmax."""
    return _mean(r["argmax"] != orig[(r["dataset"], r["group_id"])]["argmax"] for r in rows
                 if (r["dataset"], r["group_id"]) in orig)


def v(rows, orig):
    """Stability V: over groups with an orig row, the share with at least one changed answer."""
    return _mean(any(r["argmax"] != orig[g]["argmax"] for r in rs) for g, rs in _groups(rows).items() if g in orig)



def _caption_pairs(rows, orig):
    """(reference s, variant s, variant meta) of every paraphrase and every flip, by the LGIP pairing rule."""
    by_variant = {(r["dataset"], r["group_id"], r["variant"]): r for r in rows}
    paraphrases, flips = [], []
    for r in rows:
        meta = r["meta"]
        is_flip = r["family"] == "lgip_flip" or meta.get("role") == "flip"
        if r["family"] == "lgip_combined" and is_flip:
            reference = by_variant[(r["dataset"], r["group_id"], meta["reference"])]
        else:
            reference = orig[(r["dataset"], r["group_id"])]
        (flips if is_flip else paraphrases).append((reference["logits"][0], r["logits"][0], meta))
    return paraphrases, flips


def e_inv(rows, orig):
    return _mean(abs(a - b) for a, b, _ in _caption_pairs(rows, orig)[0])


def e_sens(rows, orig):
    return _mean(a - b for a, b, _ in _caption_pairs(rows, orig)[1])


def pr(rows, orig):
    return _mean(a > b for a, b, _ in _caption_pairs(rows, orig)[1])


RECOMPUTE = {"acc": lambda rows, orig: acc(rows), "delta": delta, "flip": flip, "asr": asr,
             "e_inv": e_inv, "e_sens": e_sens, "pr": pr, "av": av, "v": v}


def test_every_declared_variant_fires(records):
    fired = defaultdict(set)
    for r in records:
        fired[r["family"]].add(r["variant"])
    for family in declared():
        for variant in family.variants:
            if variant.endswith("*"):
                assert any(v.startswith(variant[:-1]) for v in fired[family.name]), (family.name, variant)
            else:
                assert variant in fired[family.name], (family.name, variant)


def test_every_headline_equals_its_recomputation(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    orig = _orig(records)
    checked = 0
    for family in declared():
        by_dataset = defaultdict(list)
        for r in records:
            if r["family"] == family.name:
                by_dataset[r["dataset"]].append(r)
        assert by_dataset, family.name
        for dataset, rows in by_dataset.items():
            cell = summary_cell(summary, family.name, dataset)
            for metric in family.headline:
                if family.name == "option_set" and metric.key == "flip":
                    expected = label_flip(rows, orig)
                else:
                    expected = RECOMPUTE[metric.key](rows, orig)
                if family.name == "orig" and dataset == "shape_captions":
                    assert expected is None and cell[metric.key] is None  # a caption has no right answer
                    continue
                assert expected is not None, (family.name, dataset, metric.key)
                assert cell[metric.key] == pytest.approx(expected, abs=1e-6), (family.name, dataset, metric.key)
                checked += 1
    assert checked >= 2 * len(declared())


def test_the_option_set_flip_pools_both_variants(records):
    """The headline is the pooled rate over every comparable row of both variants, not a mean of the two rates."""
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    cell = summary["options"]["option_set"]["colour_choice"]
    variants = cell["variants"]
    assert set(variants) == {"add_distractor", "drop_wrong"}
    flipped = sum(v["n_flipped"] for v in variants.values())
    comparable = sum(v["n_comparable"] for v in variants.values())
    assert cell["n_comparable"] == comparable
    assert cell["flip"] == pytest.approx(flipped / comparable, abs=1e-6)
    rates = [v["flip_rate"] for v in variants.values()]
    assert min(rates) <= cell["flip"] <= max(rates)


def test_the_any_row_pools_every_visual_stability_family(records):
    """"any": AV over every instance of the default visual families of a set, V over its samples changed by
    at least one of them; recomputed from the records."""
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    orig = _orig(records)
    visual = {f.name for f in declared() if f.block == "stability" and f.modality == "visual" and f.default}
    assert {"shift", "pad_crop", "scale", "scale_pad", "rotation", "overlay"} <= visual
    assert "rotation_sweep" not in visual  # opt-in: not in the default run, so not in "any"
    cells = summary["stability"]["any"]
    assert set(cells) == {r["dataset"] for r in records if r["family"] in visual}
    for dataset, cell in cells.items():
        rows = [r for r in records if r["family"] in visual and r["dataset"] == dataset]
        assert cell["av"] == pytest.approx(av(rows, orig), abs=1e-6)
        assert cell["v"] == pytest.approx(v(rows, orig), abs=1e-6)
        assert cell["av_ci"][0] <= cell["av"] <= cell["av_ci"][1]
        assert set(cell["families"]) == {r["family"] for r in rows}
    # pooled, not averaged: V of the union is at least every family's own V
    assert all(f["v"] <= cell["v"] + 1e-9 for cell in cells.values() for f in cell["families"].values())


def test_the_worst_attribute_pr_is_the_lowest_of_the_attributes(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    orig = _orig(records)
    cell = summary["lgip"]["lgip_flip"]["shape_captions"]
    flips = _caption_pairs([r for r in records if r["family"] == "lgip_flip"], orig)[1]
    by_attribute = defaultdict(list)
    for a, b, meta in flips:
        by_attribute[meta["attribute"]].append(a > b)
    assert set(by_attribute) == {"object", "colour", "count"}
    worst = min(by_attribute, key=lambda k: (_mean(by_attribute[k]), k))
    assert cell["pr_min_attribute"] == worst
    assert cell["pr_min"] == pytest.approx(_mean(by_attribute[worst]), abs=1e-6)


def test_flat_block_holds_exactly_the_flat_families(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    assert set(summary[FLAT]) == {f.name for f in declared() if f.block == FLAT}


def test_circular_accuracy_and_accuracy_by_gold_position(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    cell = summary[FLAT]["option_order"]["colour_choice"]
    orig = _orig(records)
    groups = _groups(r for r in records if r["family"] == "option_order" and r["dataset"] == "colour_choice")

    def cyclic(order):  # a circular shift of the original order 0..k-1
        return list(order) == [(order[0] + i) % len(order) for i in range(len(order))]

    # CircularEval (MMBench / VLMEvalKit): right under the original order and every one of its k-1 circular
    # shifts; the stricter figure: right under every display order shown (the reversal and permutation too)
    circular, all_orders = [], []
    for g, rs in groups.items():
        shifts = [r for r in rs if cyclic(r["meta"]["display_order"])]
        assert len(shifts) == len(orig[g]["probs"]) - 1  # every shift is scored
        circular.append(all(r["argmax"] == r["label"] for r in [orig[g], *shifts]))
        all_orders.append(all(r["argmax"] == r["label"] for r in [orig[g], *rs]))
    assert cell["n_circular"] == len(circular) and cell["circular_acc"] == pytest.approx(_mean(circular), abs=1e-6)
    assert cell["all_orders_acc"] == pytest.approx(_mean(all_orders), abs=1e-6)
    assert cell["all_orders_acc"] < cell["circular_acc"] <= cell["acc"]  # the data tells the two apart
    for key in ("circular_acc", "all_orders_acc"):
        lo, hi = cell[f"{key}_ci"]
        assert lo <= cell[key] <= hi
    by_position = defaultdict(list)
    for g, rs in groups.items():
        by_position[orig[g]["label"]].append(orig[g]["argmax"] == orig[g]["label"])
        for r in rs:
            by_position[r["meta"]["display_order"].index(r["label"])].append(r["argmax"] == r["label"])
    assert cell["acc_by_position"] == {str(p): pytest.approx(_mean(v), abs=1e-6) for p, v in by_position.items()}
    assert cell["n_by_position"] == {str(p): len(v) for p, v in by_position.items()}


def test_a_cell_alone_and_through_the_cache_equals_the_full_summary(records):
    """family_cell of any cell equals summarize's; a summary made through a CellCache that the family
    cells filled is the same summary, and reuses those cells instead of computing them again."""
    import json

    from laya_robustness.records import parse_records
    from laya_robustness.summary import CellCache, family_cell

    parsed = parse_records(records)  # the same objects in every call, as a session holds them
    plain = summarize(parsed, n_boot=20, n_boot_ece=20)
    cache = CellCache()
    cells = {(r["family"], r["dataset"]) for r in parsed}
    for family, dataset in sorted(cells):
        alone = family_cell(parsed, family, dataset, n_boot=20, n_boot_ece=20, cache=cache)
        assert json.dumps(alone, sort_keys=True) == json.dumps(summary_cell(plain, family, dataset), sort_keys=True)
    computed = []
    real = cache.cell
    cache.cell = lambda key, rows, orig, compute: real(key, rows, orig, lambda: computed.append(key) or compute())
    cached = summarize(parsed, n_boot=20, n_boot_ece=20, cache=cache)
    assert json.dumps(cached, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert computed == []  # every cell came from the cache
    changed = [dict(r, argmax=(r["argmax"] + 1) % len(r["logits"])) if r["family"] == "text" else r for r in parsed]
    summarize(changed, n_boot=20, n_boot_ece=20, cache=cache)
    assert {key[0] for key in computed} == {"text"}  # new record objects: recomputed, the others reused
