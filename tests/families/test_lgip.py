"""LGIP variant builders: every paraphrase rule by hand, flips that really contradict, their grading, determinism."""

import doctest
import json
from collections import Counter

import pytest
from PIL import Image

from laya_robustness.families.lgip.grammar import caption_holds
from laya_robustness.recipes.fixture_captions import generate_captions
from laya_robustness.loaders.captions import caption_row
from laya_robustness.loaders.variant_files import load_paraphrases
from laya_robustness.families.lgip.caption_variants import (PARAPHRASE_RULES, agree_there, build_combined, build_flips,
                                                    build_paraphrases, count_strength, paraphrases,
                                                    passive, reorder_list, reorder_relation, scene_flips, synonym,
                                                    word_list_flips)
from laya_robustness.metrics.lgip import FAMILY_COMBINED, FAMILY_FLIP, FAMILY_PARAPHRASE
from laya_robustness.rows import RowError

IMAGE = Image.new("RGB", (4, 4))
SCENE = [
    {"shape": "circle", "colour": "red", "col": 0, "row": 0},
    {"shape": "square", "colour": "blue", "col": 2, "row": 3},
    {"shape": "square", "colour": "blue", "col": 3, "row": 3},
]


@pytest.mark.parametrize("rule, text, expected", [
    ("photo_of", "a red circle and two blue squares", "a photo of a red circle and two blue squares"),
    ("photo_of", "A man riding a horse.", "A photo of a man riding a horse."),
    ("photo_of", "A man is riding a horse.", None),  # not a noun phrase
    ("photo_of", "there are two blue squares", None),
    ("image_showing", "two blue squares", "an image showing two blue squares"),
    ("in_this_picture", "there are two blue squares", "in this picture, there are two blue squares"),
    ("in_this_picture", "A man is riding a horse", "In this picture, a man is riding a horse"),
    ("in_this_picture", "the picture shows a red circle", None),  # already names the picture
    ("synonym", "the picture shows two blue squares above a circle",
     "the image depicts 2 blue squares over a circle"),
    ("synonym", "A man on a bike.", "A guy on a bicycle."),
    ("synonym", "a red circle", None),
    ("passive", "the picture shows a red circle and two blue squares",
     "a red circle and two blue squares are shown in the picture"),
    ("passive", "the picture shows a red circle", "a red circle is shown in the picture"),
    ("passive", "A man is riding a horse on the beach.", "A horse is being ridden by a man on the beach."),
    ("passive", "A woman holding an umbrella while walking.", "An umbrella being held by a woman while walking."),
    ("passive", "Two dogs playing with a frisbee.", None),  # no object before the preposition
    ("passive", "a red circle and two blue squares", None),
    ("reorder_relation", "a yellow square above a red circle", "a red circle below a yellow square"),
    ("reorder_relation", "a red circle to the left of two blue squares",
     "two blue squares to the right of a red circle"),
    ("reorder_relation", "A dog next to a red car.", "A red car next to a dog."),
    ("reorder_relation", "A red bus parked next to a white car", None),  # "parked" is not a noun
    ("reorder_list", "a red circle, two blue squares and a green triangle",
     "a green triangle, two blue squares and a red circle"),
    ("reorder_list", "there is a red circle and two blue squares", "there are two blue squares and a red circle"),
    ("reorder_list", "the picture shows two men and a dog.", "the picture shows a dog and two men."),
    ("reorder_list", "A man and a woman sitting on a bench", None),
    ("reorder_list", "two blue squares", None),
])
def test_paraphrase_rules_by_hand(rule, text, expected):
    assert PARAPHRASE_RULES[rule](text) == expected


def test_passive_needs_short_noun_phrases():
    assert passive("Two women holding umbrellas") is None  # the object has no determiner
    assert passive("A very tall man in a hat holding a cup") is None  # subject too long
    assert synonym("Three dogs") == "3 dogs" and reorder_relation("a circle above") is None
    assert reorder_list("a circle, a square and") is None


def _rows():
    return generate_captions(30, seed=5)


def test_build_paraphrases_keeps_group_and_cluster_and_names_the_rule():
    rows = _rows()
    variants = build_paraphrases(rows, seed=0)
    by_id = {r.row_id: r for r in rows}
    assert len(variants) > 3 * len(rows)
    for v in variants:
        source = by_id[v.group_id]
        assert (v.family, v.cluster, v.primitive, v.label, v.images) == (FAMILY_PARAPHRASE, source.cluster, "score",
                                                                         -1, source.images)
        assert v.variant == v.meta["rule"] and v.options[0] == paraphrases(source.options[0])[v.variant]
        assert v.options[0] != source.options[0] and v.row_id == f"{v.group_id}|{FAMILY_PARAPHRASE}|{v.variant}"
    kinds = Counter(v.meta["kind"] for v in variants)
    assert set(kinds) == {"wrapper", "rewrite"} and len({v.variant for v in variants}) == 7
    assert len({v.row_id for v in variants}) == len(variants)


def test_user_paraphrases_by_row_id(tmp_path):
    rows = _rows()[:3]
    path = tmp_path / "para.jsonl"
    path.write_text(json.dumps({"row_id": rows[1].row_id, "paraphrases": ["one", " two "]}) + "\n"
                    + json.dumps({"row_id": "not/a/row", "paraphrases": ["x"]}) + "\n")
    user = load_paraphrases(path)
    assert user == {rows[1].row_id: ("one", "two"), "not/a/row": ("x",)}
    variants = [v for v in build_paraphrases(rows, 0, user) if v.meta["kind"] == "user"]
    assert [(v.group_id, v.variant, v.options[0]) for v in variants] == [
        (rows[1].row_id, "user_0", "one"), (rows[1].row_id, "user_1", "two")]


@pytest.mark.parametrize("line, field", [
    ("{oops", "<json>"), ("[1]", "<json>"), ('{"paraphrases": ["a"]}', "row_id"),
    ('{"row_id": "r", "paraphrases": "a"}', "paraphrases"), ('{"row_id": "r", "paraphrases": []}', "paraphrases"),
    ('{"row_id": "r", "paraphrases": ["a", ""]}', "paraphrases[1]"), ('{"row_id": "x", "paraphrases": ["a"]}', "row_id"),
])
def test_user_paraphrase_errors_name_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "p.jsonl"
    path.write_text('{"row_id": "x", "paraphrases": ["fine"]}\n' + line + "\n")
    with pytest.raises(RowError) as err:
        load_paraphrases(path)
    assert (err.value.path, err.value.line, err.value.field_name) == (str(path), 2, field)


def test_scene_flips_contradict_and_are_graded_by_hand():
    flips = {(f.text, f.attribute, f.strength) for f in scene_flips("a red circle above two blue squares", SCENE)}
    assert ("a blue circle above two blue squares", "colour", "weak") in flips  # blue is elsewhere
    assert ("a green circle above two blue squares", "colour", "strong") in flips  # no green at all
    assert ("a red square above two blue squares", "object", "weak") in flips
    assert ("a red triangle above two blue squares", "object", "strong") in flips
    assert ("two red circles above two blue squares", "count", "weak") in flips
    assert ("a red circle above five blue squares", "count", "strong") in flips
    assert ("a red circle above four blue squares", "count", "medium") in flips
    assert all(not caption_holds(t, SCENE) for t, _, _ in flips)


def test_a_flip_that_would_still_be_true_is_dropped():
    scene = [{"shape": "circle", "colour": "red", "col": 0, "row": 0},
             {"shape": "square", "colour": "red", "col": 1, "row": 0}]
    texts = {f.text for f in scene_flips("a red circle", scene)}
    assert "a red square" not in texts and "a blue circle" in texts  # there is exactly one red square
    assert {f.text for f in scene_flips("two red shapes", scene)} >= {"a red shape", "two blue shapes"}
    assert "two red shapes" not in texts


def test_count_flip_keeps_there_is_are_in_agreement():
    assert agree_there("there are a green square") == "there is a green square"
    assert agree_there("There is three squares") == "There are three squares"
    flips = {f.text for f in scene_flips("there are two blue squares", SCENE) if f.attribute == "count"}
    assert "there is a blue square" in flips and "there are three blue squares" in flips
    assert [count_strength(d) for d in (1, -1, 2, -3, 5)] == ["weak", "weak", "medium", "strong", "strong"]


def test_word_list_flips_check_every_caption_of_the_image():
    text = "A white cat sitting on a red chair."
    others = [text, "A cat on a pink chair.", "A dog looks at a cat."]
    flips = word_list_flips(text, others)
    targets = {(f.attribute, f.target) for f in flips}
    assert ("colour", "pink") not in targets and ("object", "dog") not in targets  # named by another caption
    assert ("colour", "blue") in targets and ("object", "horse") in targets
    grade = {(f.attribute, f.source, f.target): f.strength for f in flips}
    assert grade[("colour", "red", "purple")] == "weak" and grade[("colour", "red", "green")] == "strong"
    assert grade[("object", "cat", "horse")] == "weak" and grade[("object", "cat", "car")] == "strong"
    assert grade[("colour", "white", "gray")] == "weak"
    plural = {f.text for f in word_list_flips("Two dogs and three people", ["Two dogs and three people"])}
    assert "Two cats and three people" in plural and "Five dogs and three people" in plural
    grades = {(f.source, f.target): f.strength for f in word_list_flips("Two dogs and three people",
                                                                        ["Two dogs and three people"])}
    assert grades[("people", "men")] == "weak" and grades[("dogs", "cars")] == "strong"
    assert not any(f.attribute == "count" for f in word_list_flips("A dog", ["A dog"]))
    grey = word_list_flips("A grey cat on a couch", ["A grey cat on a couch", "A gray cat on a sofa"])
    assert not any(f.target in ("gray", "grey", "sofa") for f in grey)
    assert any(f.target == "white" for f in grey) and any(f.target == "dog" for f in grey)
    article = {(f.source, f.target): f.text
               for f in word_list_flips("A man holding an umbrella", ["A man holding an umbrella"])}
    assert article[("umbrella", "cup")] == "A man holding a cup"
    assert article[("man", "elephant")] == "An elephant holding an umbrella"


def test_build_flips_one_per_bucket_contradicting_the_scene():
    rows = _rows()
    flips = build_flips(rows, seed=0)
    by_id = {r.row_id: r for r in rows}
    assert len(flips) > 3 * len(rows)
    for f in flips:
        source = by_id[f.group_id]
        assert f.variant == f"{f.meta['attribute']}_{f.meta['strength']}"
        assert not caption_holds(f.options[0], source.meta["objects"])
        assert caption_holds(source.options[0], source.meta["objects"])
    per_group = Counter((f.group_id, f.variant) for f in flips)
    assert max(per_group.values()) == 1
    assert {f.meta["attribute"] for f in flips} == {"colour", "object", "count"}
    assert {f.meta["strength"] for f in flips if f.meta["attribute"] == "count"} == {"weak", "medium", "strong"}
    assert [f.options for f in flips] == [f.options for f in build_flips(rows, seed=0)]
    assert [f.options for f in flips] != [f.options for f in build_flips(rows, seed=1)]


def test_word_list_mode_flips_through_the_builder():
    rows = [caption_row("c/1", "c", "c/img1", IMAGE, "A black dog on a couch."),
            caption_row("c/2", "c", "c/img1", IMAGE, "A dog sleeping on a brown sofa."),
            caption_row("c/3", "c", "c/img2", IMAGE, "Two brown horses in a field.")]
    flips = build_flips(rows, seed=0)
    first = [f for f in flips if f.group_id == "c/1"]
    assert {f.meta["attribute"] for f in first} == {"object", "colour"}
    assert all("brown" not in f.options[0] and "sofa" not in f.options[0] for f in first)
    assert {f.variant for f in flips if f.group_id == "c/3"} >= {"count_weak", "count_medium", "count_strong"}


def test_combined_flips_are_the_paraphrase_rule_applied_to_the_flips():
    rows = _rows()
    combined = build_combined(rows, seed=0)
    flips = {(f.group_id, f.variant): f for f in build_flips(rows, seed=0)}
    references = {v.group_id: v for v in combined if v.variant == "paraphrase"}
    assert len(references) == len(rows)
    n_flips = 0
    for v in combined:
        assert v.family == FAMILY_COMBINED
        rule = PARAPHRASE_RULES[v.meta["rule"]]
        if v.meta["role"] == "flip":
            n_flips += 1
            assert v.meta["reference"] == "paraphrase" and v.meta["rule"] == references[v.group_id].meta["rule"]
            assert v.options[0] == rule(flips[(v.group_id, v.variant)].options[0])
            assert v.meta["attribute"] == flips[(v.group_id, v.variant)].meta["attribute"]
        else:
            assert v.options[0] == rule(next(r for r in rows if r.row_id == v.group_id).options[0])
    assert n_flips > 3 * len(rows) and len({v.meta["rule"] for v in references.values()}) >= 4


def test_builders_refuse_rows_that_are_not_captions(fixture_rows):
    with pytest.raises(ValueError, match="not a caption row"):
        build_flips(fixture_rows["colour_choice"][:2], 0)


def test_docstring_examples_hold():
    import laya_robustness.families.lgip.grammar
    import laya_robustness.families.lgip.caption_variants
    import laya_robustness.metrics.lgip

    for module in (laya_robustness.families.lgip.grammar, laya_robustness.families.lgip.caption_variants, laya_robustness.metrics.lgip):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
