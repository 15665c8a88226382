"""Every headline of every summary block equals a plain recomputation from the records, on rows where
every variant of every family fires (unlike the fixture sets, whose fixed option sets never get a distractor)."""

import dataclasses
from collections import defaultdict

import pytest

from fakes import OracleScorer
from laya_robustness.families import FLAT, build_variants, declared
from laya_robustness.fixture_rows import generate_rows
from laya_robustness.records import prediction_record
from laya_robustness.summary import summarize, summary_cell

WORDS = ("crimson", "lime", "navy", "gold", "teal", "plum", "rust", "sand")
TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}


def _varied(rows):
    """Every other choice row gets options from a word list, so rows of other images offer distractors."""
    out = []
    for i, r in enumerate(rows):
        if i % 2:
            options = tuple(WORDS[(i + j) % len(WORDS)] for j in range(len(r.options)))
            r = dataclasses.replace(r, options=options)
        out.append(r)
    return out


def _with_user_variants(rows):
    """Every third row carries a user rephrasing and a user translation, so the user variants fire too."""
    return [dataclasses.replace(r, meta={**r.meta, "rephrasings": [f"Please answer this: {r.question}"],
                                         "translations": {"nl": f"{r.question} (in het Nederlands)"}})
            if i % 3 == 0 else r for i, r in enumerate(rows)]


def _what_is(rows):
    """Every other row asks "What is the colour of the <shape>?" (the form of the tell_me rephrasing)."""
    return [dataclasses.replace(r, question=r.question.replace("Which colour does", "What is the colour of")
                                .replace(" have?", "?")) if i % 2 else r for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def records():
    sources = {"choice": _with_user_variants(_varied(generate_rows("colour_choice", 24, seed=3))),
               "noul": _with_user_variants(generate_rows("exists_yesno", 24, seed=3)),
               # the other question forms, so every rephrasing rule fires
               "count": generate_rows("count_choice", 8, seed=3), "left_of": generate_rows("left_of_yesno", 8, seed=3),
               "context": _what_is(generate_rows("context_choice", 8, seed=3))}
    scorer = OracleScorer("fake", margin=1.0, noise=1.0)
    out = []
    for rows in sources.values():
        for family in declared():
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


RECOMPUTE = {"acc": lambda rows, orig: acc(rows), "delta": delta, "flip": flip, "asr": asr, "av": av, "v": v}


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


def test_flat_block_holds_exactly_the_flat_families(records):
    summary = summarize(records, n_boot=20, n_boot_ece=20)
    assert set(summary[FLAT]) == {f.name for f in declared() if f.block == FLAT}
