"""language: the same question in another language, asking for the answer in English.

Variants ``lang_<code>``, one per language a row has a translation in:

- built in: hand-written French, German, Spanish, Italian and Portuguese translations of the
  fixture question templates (``fixture_rows``), each followed by the request to answer in
  English in that language (:data:`ANSWER_IN_ENGLISH`):
  "Is there a <colour> <shape>?", "Is the <shape> left of the <shape>?", "What colour is the
  <shape>?", "Which colour does the <shape> have?", "How many <shape>s are there?" and "How many
  <colour> shapes are there?" (colours red / green / blue / yellow, shapes circle / square /
  triangle; the whole question must match, ignoring outer spaces). Any other question gets no
  built-in translation.
- the user's: the row's ``meta["translations"]`` (a mapping language code -> question, put there
  from the user's JSONL file by ``run.inputs.run_inputs.attach_user_variants``), used as written (it should
  carry its own request to answer in English); a user translation replaces the built-in one of
  the same language.

The options, label, images and context are kept (the options stay English, so the model answers
in English). ``meta["translation"]`` holds ``{"language": code, "source": "builtin" | "user"}``.
Rows of every primitive get them (open rows too). No randomness: ``seed`` is unused.

>>> translations("Is there a red square?")["de"]
'Gibt es ein rotes Quadrat? Antworte auf Englisch.'
>>> translations("How many circles are there?")["fr"]
'Combien de cercles y a-t-il ? Répondez en anglais.'
"""

from __future__ import annotations

import re
from typing import Sequence

from laya_robustness.families import Family, declare
from laya_robustness.families.rephrase import TRANSLATIONS_KEY as USER_KEY
from laya_robustness.metrics.stability import AV, V, stability_cell
from laya_robustness.rows import Row, user_meta_problem

FAMILY = "language"
LANGUAGES = ("fr", "de", "es", "it", "pt")
ANSWER_IN_ENGLISH = {
    "fr": "Répondez en anglais.",
    "de": "Antworte auf Englisch.",
    "es": "Responde en inglés.",
    "it": "Rispondi in inglese.",
    "pt": "Responda em inglês.",
}

# Words per language. Shapes: (singular, plural); German also the article and gender of the noun.
SHAPES = {
    "fr": {"circle": ("cercle", "cercles"), "square": ("carré", "carrés"), "triangle": ("triangle", "triangles")},
    "de": {"circle": ("Kreis", "Kreise"), "square": ("Quadrat", "Quadrate"), "triangle": ("Dreieck", "Dreiecke")},
    "es": {"circle": ("círculo", "círculos"), "square": ("cuadrado", "cuadrados"),
           "triangle": ("triángulo", "triángulos")},
    "it": {"circle": ("cerchio", "cerchi"), "square": ("quadrato", "quadrati"), "triangle": ("triangolo", "triangoli")},
    "pt": {"circle": ("círculo", "círculos"), "square": ("quadrado", "quadrados"),
           "triangle": ("triângulo", "triângulos")},
}
GERMAN_GENDER = {"circle": "m", "square": "n", "triangle": "n"}
# Colours: (with a masculine singular noun, with the feminine plural "shapes"); German: the stem.
COLOURS = {
    "fr": {"red": ("rouge", "rouges"), "green": ("vert", "vertes"), "blue": ("bleu", "bleues"),
           "yellow": ("jaune", "jaunes")},
    "de": {"red": "rot", "green": "grün", "blue": "blau", "yellow": "gelb"},
    "es": {"red": ("rojo", "rojas"), "green": ("verde", "verdes"), "blue": ("azul", "azules"),
           "yellow": ("amarillo", "amarillas")},
    "it": {"red": ("rosso", "rosse"), "green": ("verde", "verdi"), "blue": ("blu", "blu"),
           "yellow": ("giallo", "gialle")},
    "pt": {"red": ("vermelho", "vermelhas"), "green": ("verde", "verdes"), "blue": ("azul", "azuis"),
           "yellow": ("amarelo", "amarelas")},
}

_COLOUR = "(red|green|blue|yellow)"
_SHAPE = "(circle|square|triangle)"
TEMPLATES = {
    "exists": rf"Is there an? {_COLOUR} {_SHAPE}\?",
    "left_of": rf"Is the {_SHAPE} left of the {_SHAPE}\?",
    "colour": rf"(?:What colour is the {_SHAPE}|Which colour does the {_SHAPE} have)\?",
    "count_shape": rf"How many {_SHAPE}s are there\?",
    "count_colour": rf"How many {_COLOUR} shapes are there\?",
}


#: What the gate says when a set's questions have no translation (built-in ones cover the fixture templates only).
WHEN_EMPTY = ("its questions have no built-in translation (only the fixture templates do) and --translations gives "
              "none; write translations with a language model: python -m laya_robustness variants translate "
              "--model <chat model> --data <rows> --out translations.jsonl, then pass --translations "
              "translations.jsonl")


def _german_noun(shape: str, case: str) -> str:
    """The German shape with its definite article: nominative ("der Kreis") or after "von" ("vom Kreis")."""
    noun = SHAPES["de"][shape][0]
    if case == "dative":
        return f"vom {noun}"
    return f"{'der' if GERMAN_GENDER[shape] == 'm' else 'das'} {noun}"


def _exists(lang: str, colour: str, shape: str) -> str:
    noun = SHAPES[lang][shape][0]
    if lang == "de":
        stem = COLOURS["de"][colour]
        article = "einen" if GERMAN_GENDER[shape] == "m" else "ein"
        ending = "en" if GERMAN_GENDER[shape] == "m" else "es"
        return f"Gibt es {article} {stem}{ending} {noun}?"
    adjective = COLOURS[lang][colour][0]
    return {"fr": f"Y a-t-il un {noun} {adjective} ?", "es": f"¿Hay un {noun} {adjective}?",
            "it": f"C'è un {noun} {adjective}?", "pt": f"Há um {noun} {adjective}?"}[lang]


def _left_of(lang: str, a: str, b: str) -> str:
    if lang == "de":
        return f"Ist {_german_noun(a, 'nominative')} links {_german_noun(b, 'dative')}?"
    x, y = SHAPES[lang][a][0], SHAPES[lang][b][0]
    return {"fr": f"Le {x} est-il à gauche du {y} ?", "es": f"¿Está el {x} a la izquierda del {y}?",
            "it": f"Il {x} è a sinistra del {y}?", "pt": f"O {x} está à esquerda do {y}?"}[lang]


def _colour(lang: str, shape: str) -> str:
    if lang == "de":
        return f"Welche Farbe hat {_german_noun(shape, 'nominative')}?"
    x = SHAPES[lang][shape][0]
    return {"fr": f"De quelle couleur est le {x} ?", "es": f"¿De qué color es el {x}?",
            "it": f"Di che colore è il {x}?", "pt": f"De que cor é o {x}?"}[lang]


def _count_shape(lang: str, shape: str) -> str:
    x = SHAPES[lang][shape][1]
    return {"fr": f"Combien de {x} y a-t-il ?", "de": f"Wie viele {x} gibt es?", "es": f"¿Cuántos {x} hay?",
            "it": f"Quanti {x} ci sono?", "pt": f"Quantos {x} há?"}[lang]


def _count_colour(lang: str, colour: str) -> str:
    if lang == "de":
        return f"Wie viele {COLOURS['de'][colour]}e Formen gibt es?"
    x = COLOURS[lang][colour][1]
    return {"fr": f"Combien de formes {x} y a-t-il ?", "es": f"¿Cuántas formas {x} hay?",
            "it": f"Quante forme {x} ci sono?", "pt": f"Quantas formas {x} há?"}[lang]


def _translate(lang: str, template: str, groups: Sequence[str]) -> str:
    if template == "exists":
        return _exists(lang, *groups)
    if template == "left_of":
        return _left_of(lang, *groups)
    if template == "colour":
        return _colour(lang, next(g for g in groups if g))
    if template == "count_shape":
        return _count_shape(lang, *groups)
    return _count_colour(lang, *groups)


def translations(question: str) -> dict[str, str]:
    """language -> the built-in translation of a fixture-template question (with the request to answer
    in English); {} for any other question."""
    for template, pattern in TEMPLATES.items():
        m = re.fullmatch(pattern, question.strip())
        if m:
            return {lang: f"{_translate(lang, template, m.groups())} {ANSWER_IN_ENGLISH[lang]}" for lang in LANGUAGES}
    return {}


def user_translations(row: Row) -> dict[str, str]:
    """The row's ``meta["translations"]`` ({} when absent); a bad code or text raises ValueError."""
    value = row.meta.get(USER_KEY, {})
    problem = user_meta_problem(USER_KEY, value)
    if problem is not None:
        raise ValueError(f"{row.row_id}: field 'meta.{problem[0]}': {problem[1]}")
    return dict(value)


def build(rows: Sequence[Row], seed: int) -> list[Row]:
    """Every row in each language it has a translation in (built-in, or the user's, which wins)."""
    out = []
    for row in rows:
        chosen = {lang: (text, "builtin") for lang, text in translations(row.question).items()}
        chosen.update({lang: (text, "user") for lang, text in user_translations(row).items() if text.strip()})
        for lang in sorted(chosen):
            text, source = chosen[lang]
            meta = {**row.meta, "translation": {"language": lang, "source": source}}
            out.append(row.derive(FAMILY, f"lang_{lang}", question=text, meta=meta))
    return out


declare(Family(
    name=FAMILY, row_wise=True, build=build, kind="invariance", modality="language", block="stability",
    reads_pixels=False,
    variants=tuple(f"lang_{lang}" for lang in LANGUAGES) + ("lang_*",), meta_keys={"*": ("translation",)},
    headline=(AV, V), checks=("max_av", "max_v"), cell=stability_cell,
    summary="the question in French, German, Spanish, Italian, Portuguese (fixture templates) or the user's "
            "languages, asking for an English answer",
    title="language", short="language", when_empty=WHEN_EMPTY,
))
