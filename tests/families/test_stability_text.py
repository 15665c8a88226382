"""The text stability families (rephrase, language), the user's files and the rotation-variant question rule."""

from __future__ import annotations

import json

import pytest

from laya_robustness.families import build_variants, get_family
from laya_robustness.families import language, rephrase, rotation
from laya_robustness.loaders.variant_files import read_user_file
from laya_robustness.run.inputs.run_inputs import attach_user_variants
from laya_robustness.recipes.fixture_rows import SET_NAMES, generate_rows
from laya_robustness.rows import Row, RowError

from helpers.rows import unit_row

SEED = 0


def make_row(row_id: str, question: str, **kw) -> Row:
    return unit_row(row_id, **{"options": ("no", "yes"), "label": 1, "primitive": "noul", "meta": {"source": "unit"},
                               "images": (), **kw, "question": question})


# --- rephrase rules ---------------------------------------------------------------------------

REPHRASINGS = [
    ("Is there a red circle?", {"show": "Does the image show a red circle?",
                                "see": "Can you see a red circle in the image?"}),
    ("Are there two dogs in the picture?", {"show": "Does the picture show two dogs?",
                                            "see": "Can you see two dogs in the picture?"}),
    ("What colour is the circle?", {"which_colour": "Which colour is the circle?",
                                    "colour_of": "What is the colour of the circle?"}),
    ("What color are the cars?", {"which_colour": "Which color are the cars?",
                                  "colour_of": "What is the color of the cars?"}),
    ("Which colour does the triangle have?", {"colour_of": "What is the colour of the triangle?",
                                              "colour_is": "What colour is the triangle?"}),
    ("How many circles are there?", {"number_of": "What is the number of circles?",
                                     "can_be_seen": "How many circles can be seen?"}),
    ("How many red shapes are there in the image?",
     {"number_of": "What is the number of red shapes in the image?",
      "can_be_seen": "How many red shapes can be seen in the image?"}),
    ("Is the circle left of the square?", {"to_the_side": "Is the circle to the left of the square?",
                                           "converse": "Is the square right of the circle?"}),
    ("Is the cat to the right of the dog?", {"to_the_side": "Is the cat right of the dog?",
                                             "converse": "Is the dog to the left of the cat?"}),
    ("Is the lamp above the table?", {"converse": "Is the table below the lamp?"}),
    ("What is the title of the book?", {"tell_me": "Can you tell me what the title of the book is?"}),
    ("What is the brand?", {"tell_me": "Can you tell me what the brand is?"}),
    # forms no rule knows: no rephrasing rather than a wrong one
    ("What is the man holding?", {}),
    ("Is the man on the left wearing a hat?", {}),
    ("Describe the image.", {}),
    ("", {}),
]


@pytest.mark.parametrize("question, expected", REPHRASINGS)
def test_rephrasing_rules(question, expected):
    assert rephrase.rephrasings(question) == expected


def test_the_rules_match_ignoring_case_and_outer_spaces():
    assert rephrase.rephrasings("  is there a red circle ?  ")["show"] == "Does the image show a red circle?"
    assert rephrase.rephrasings("is the cat left of the dog?")["converse"] == "is the dog right of the cat?"


def test_every_fixture_question_gets_two_rule_rephrasings():
    for name in SET_NAMES:
        for row in generate_rows(name, 40, seed=1):
            got = rephrase.rephrasings(row.question)
            assert len(got) == 2, (row.question, got)
            assert all(q != row.question and q.endswith("?") for q in got.values())


def test_rephrase_rows_keep_options_label_images_and_add_user_rephrasings():
    src = make_row("ds/1", "Is there a red circle?",
                   meta={"source": "unit", "rephrasings": ["Do you see a red circle?", "", "Is there a red circle?",
                                                           "Is a red circle present?"]})
    out = {r.variant: r for r in build_variants("rephrase", [src], SEED)}
    assert set(out) == {"rule_show", "rule_see", "user_0", "user_3"}, "empty and unchanged user strings make no row"
    assert out["user_3"].question == "Is a red circle present?"
    assert out["user_3"].meta["rephrase"] == {"source": "user", "index": 3}
    assert out["rule_see"].meta["rephrase"] == {"source": "rule", "rule": "see"}
    for r in out.values():
        assert (r.options, r.label, r.group_id, r.cluster, r.images, r.primitive) == (
            src.options, src.label, src.group_id, src.cluster, src.images, src.primitive)
        assert get_family("rephrase").knows_variant(r.variant)


def test_open_rows_are_rephrased_and_a_row_no_rule_knows_makes_none():
    open_row = make_row("ds/o", "What is the name of the shop?", options=(), label=-1, primitive="open")
    out = build_variants("rephrase", [open_row, make_row("ds/x", "Describe the image.")], SEED)
    assert [(r.group_id, r.variant, r.question) for r in out] == [
        ("ds/o", "rule_tell_me", "Can you tell me what the name of the shop is?")]
    assert out[0].options == () and out[0].label == -1


def test_a_bad_rephrasings_meta_names_the_row():
    with pytest.raises(ValueError, match=r"ds/1: field 'meta.rephrasings'"):
        build_variants("rephrase", [make_row("ds/1", "Is there a cat?", meta={"rephrasings": "Is a cat there?"})], SEED)


# --- language ---------------------------------------------------------------------------------

def test_every_fixture_question_is_translated_into_five_languages_asking_for_english():
    for name in SET_NAMES:
        for row in generate_rows(name, 40, seed=1):
            got = language.translations(row.question)
            assert sorted(got) == sorted(language.LANGUAGES), row.question
            for lang, text in got.items():
                assert text.endswith(language.ANSWER_IN_ENGLISH[lang]) and text != row.question


@pytest.mark.parametrize("question, lang, expected", [
    ("Is there a red circle?", "fr", "Y a-t-il un cercle rouge ? Répondez en anglais."),
    ("Is there a green triangle?", "de", "Gibt es ein grünes Dreieck? Antworte auf Englisch."),
    ("Is there a blue circle?", "de", "Gibt es einen blauen Kreis? Antworte auf Englisch."),
    ("Is the square left of the circle?", "de", "Ist das Quadrat links vom Kreis? Antworte auf Englisch."),
    ("Is the circle left of the triangle?", "es",
     "¿Está el círculo a la izquierda del triángulo? Responde en inglés."),
    ("What colour is the square?", "it", "Di che colore è il quadrato? Rispondi in inglese."),
    ("Which colour does the square have?", "it", "Di che colore è il quadrato? Rispondi in inglese."),
    ("How many triangles are there?", "pt", "Quantos triângulos há? Responda em inglês."),
    ("How many yellow shapes are there?", "fr", "Combien de formes jaunes y a-t-il ? Répondez en anglais."),
    ("How many blue shapes are there?", "de", "Wie viele blaue Formen gibt es? Antworte auf Englisch."),
])
def test_hand_written_translations(question, lang, expected):
    assert language.translations(question)[lang] == expected


def test_questions_outside_the_templates_get_no_builtin_translation():
    assert language.translations("Is there a purple circle?") == {}
    assert language.translations("What is the title of the book?") == {}


def test_user_translations_add_languages_and_replace_builtin_ones():
    src = make_row("ds/1", "Is there a red circle?",
                   meta={"translations": {"fr": "Voit-on un cercle rouge ? Répondez en anglais.",
                                          "pt-BR": "Tem um círculo vermelho? Responda em inglês."}})
    out = {r.variant: r for r in build_variants("language", [src], SEED)}
    assert set(out) == {"lang_de", "lang_es", "lang_fr", "lang_it", "lang_pt", "lang_pt-BR"}
    assert out["lang_fr"].question.startswith("Voit-on")
    assert out["lang_fr"].meta["translation"] == {"language": "fr", "source": "user"}
    assert out["lang_de"].meta["translation"] == {"language": "de", "source": "builtin"}
    assert all(get_family("language").knows_variant(v) for v in out)
    open_row = make_row("ds/o", "What is the name of the shop?", options=(), label=-1, primitive="open",
                        meta={"translations": {"nl": "Wat is de naam van de winkel? Antwoord in het Engels."}})
    assert [r.variant for r in build_variants("language", [open_row], SEED)] == ["lang_nl"]


def test_a_bad_translations_meta_names_the_row():
    with pytest.raises(ValueError, match=r"ds/1: field 'meta.translations'.*'French'"):
        build_variants("language", [make_row("ds/1", "Is there a cat?", meta={"translations": {"French": "x"}})], SEED)


# --- the user's files -------------------------------------------------------------------------

def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
                    encoding="utf-8")
    return path


def test_attach_user_variants_reads_both_files_into_meta(tmp_path):
    rows = {"a": [make_row("a/1", "Is there a cat?", meta={"rephrasings": ["Is a cat there?"]}),
                  make_row("a/2", "Is there a dog?")],
            "b": [make_row("a/1", "Is there a cow?", meta={"translations": {"fr": "old", "de": "alt"}})]}
    reph = _write(tmp_path, "reph.jsonl", [{"row_id": "a/1", "dataset": "a", "rephrasings": ["Can a cat be seen?"]},
                                           "", {"row_id": "zz/9", "rephrasings": ["ignored: no such row"]}])
    trans = _write(tmp_path, "trans.jsonl", [{"row_id": "a/1", "translations": {"fr": "Y a-t-il ...", "es": "¿Hay ...?"}}])
    out = attach_user_variants(rows, reph, trans)
    assert out["a"][0].meta["rephrasings"] == ["Is a cat there?", "Can a cat be seen?"]
    assert out["a"][0].meta["translations"] == {"fr": "Y a-t-il ...", "es": "¿Hay ...?"}
    assert out["b"][0].meta["translations"] == {"fr": "Y a-t-il ...", "de": "alt", "es": "¿Hay ...?"}
    assert "rephrasings" not in out["b"][0].meta, "the rephrasings named dataset a only"
    assert out["a"][1] is rows["a"][1]
    assert rows["a"][0].meta["rephrasings"] == ["Is a cat there?"], "the input rows are not changed"
    assert attach_user_variants(rows, None, None) == rows


@pytest.mark.parametrize("line, key, field, problem", [
    ("{not json", "rephrasings", "<json>", "Expecting"),
    ('["a list"]', "rephrasings", "<json>", "expected an object"),
    ({"rephrasings": ["x"]}, "rephrasings", "row_id", "expected a non-empty string"),
    ({"row_id": "a/1"}, "rephrasings", "rephrasings", "missing"),
    ({"row_id": "a/1", "rephrasings": "one string"}, "rephrasings", "rephrasings", "non-empty list"),
    ({"row_id": "a/1", "rephrasings": ["ok", " "]}, "rephrasings", "rephrasings[1]", "non-empty string"),
    ({"row_id": "a/1", "rephrasings": ["ok"], "note": 1}, "rephrasings", "note", "unknown field"),
    ({"row_id": "a/1", "dataset": 3, "rephrasings": ["ok"]}, "rephrasings", "dataset", "non-empty string"),
    ({"row_id": "a/1", "translations": ["fr"]}, "translations", "translations", "language -> text"),
    ({"row_id": "a/1", "translations": {"French": "x"}}, "translations", "translations.French", "language code"),
    ({"row_id": "a/1", "translations": {"fr": ""}}, "translations", "translations.fr", "non-empty string"),
])
def test_a_bad_line_names_the_file_line_and_field(tmp_path, line, key, field, problem):
    good = {"row_id": "a/0", key: ["fine"] if key == "rephrasings" else {"fr": "bien"}}
    path = _write(tmp_path, "user.jsonl", [good, line])
    with pytest.raises(RowError) as info:
        read_user_file(path, key)
    assert (info.value.path, info.value.line, info.value.field_name) == (str(path), 2, field)
    assert problem in str(info.value) and f"{path}:2" in str(info.value)


def test_a_row_given_twice_is_an_error(tmp_path):
    path = _write(tmp_path, "user.jsonl", [{"row_id": "a/1", "rephrasings": ["x"]},
                                           {"row_id": "a/1", "rephrasings": ["y"]}])
    with pytest.raises(RowError, match=r"user.jsonl:2: field 'row_id': 'a/1' was already given on line 1"):
        read_user_file(path, "rephrasings")


# --- the rotation-variant question rule -------------------------------------------------------

VARIANT_QUESTIONS = [
    "Is the circle left of the square?", "Is the ball on the left blue?", "Is the squirrel climbing up?",
    "Is the cat above the table?", "What is in the top-left corner?", "Is the car facing the camera?",
    "Is the bottle upside down?", "Which way is the arrow pointing?", "Is the text rotated?",
    "Is the plane flying north?", "Is the lamp below the shelf?", "Is the person's hand raised upward?",
    "Is the line vertical?", "Does the clock hand move clockwise?", "What is on the rightmost shelf?",
]
INVARIANT_QUESTIONS = [
    "Is there an elephant in the room?", "What colour is the square?", "How many circles are there?",
    "Is the man smiling?", "What is written on the sign?", "Is this a kitchen?", "Is the dog brown?",
    "Which animal is bigger?", "Is the light on?", "Are they upstairs?", "Is it a downtown street?",
]


@pytest.mark.parametrize("question", VARIANT_QUESTIONS)
def test_direction_and_frame_position_questions_are_rotation_variant(question):
    assert rotation.is_rotation_variant(question)


@pytest.mark.parametrize("question", INVARIANT_QUESTIONS)
def test_other_questions_are_rotation_invariant(question):
    assert not rotation.is_rotation_variant(question)


def test_the_options_count_and_the_row_meta_overrides_the_rule():
    assert rotation.rotation_rule("Where is the dog?", ("left", "right")) == "left"
    assert rotation.rotation_class(make_row("ds/1", "Is there a cat?")) == (False, "")
    assert rotation.rotation_class(make_row("ds/2", "Is the cat left of the dog?")) == (True, "left")
    assert rotation.rotation_class(make_row("ds/3", "Is the cat left of the dog?",
                                            meta={"rotation_variant": False})) == (False, "meta")
    assert rotation.rotation_class(make_row("ds/4", "Is there a cat?", meta={"rotation_variant": True})) == (True, "meta")
    with pytest.raises(ValueError, match=r"ds/5: field 'meta.rotation_variant': expected true or false"):
        rotation.rotation_class(make_row("ds/5", "Is there a cat?", meta={"rotation_variant": "yes"}))


def test_rotation_rows_carry_the_class():
    from PIL import Image

    image = Image.new("RGB", (8, 8), (1, 2, 3))
    rows = [make_row("ds/1", "Is the cat left of the dog?", images=(image,)),
            make_row("ds/2", "Is there a cat?", images=(image,), meta={"rotation_variant": True})]
    out = build_variants("rotation_sweep", rows, SEED)
    assert len(out) == 22
    assert {(r.group_id, r.meta["rotation_variant"], r.meta["rotation_rule"]) for r in out} == {
        ("ds/1", True, "left"), ("ds/2", True, "meta")}
