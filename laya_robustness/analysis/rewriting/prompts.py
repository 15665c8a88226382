"""The prompts a language model is given to write textual variants (one per task), the languages it can translate
into, and the hash that names a prompt in every line's provenance.

**rephrase** (:data:`REPHRASE`): the question and ``n``; the model answers with ``n`` numbered lines.
**translate** (:data:`TRANSLATE`): the question and one target language; the model answers with the
translation followed by a request, in that language, to answer in English (the stability study asks
every translated question for an English answer, so the English options and labels stay valid).

Both ask for the same meaning, every name, number and detail kept, no answer and no mention of answer
options; the checks of :mod:`~laya_robustness.analysis.rewriting.checks` enforce what they can of that.
The study generated its variants with Qwen3-8B and does not publish its prompts' text; these are the
project's own. A template's sha256 (:func:`prompt_sha256`) changes with any edit, so variants written
with another wording are never mixed into one file (the command refuses to resume across it).

>>> print(rephrase_prompt("Is there a red circle?", 2).splitlines()[-1])
Question: Is there a red circle?
>>> language_name("pt-BR"), language_script("ja")
('Portuguese (BR)', ('CJK', 'HIRAGANA', 'KATAKANA'))
"""

from __future__ import annotations

import hashlib

REPHRASE = """\
Rephrase the question below in {n} different ways. Each rephrasing must ask exactly the same thing about \
the same image, so that it has the same answer. Keep every name, number and detail; do not add or remove \
information, do not answer the question and do not mention any answer options. Write one rephrasing per \
line, numbered 1. to {n}., and nothing else.

Question: {question}"""

TRANSLATE = """\
Translate the question below into {language}. Keep its meaning exactly, with every name, number and \
detail; do not answer it and do not mention any answer options. After the translated question, add, in \
{language}, a request to answer in English. Write only the translated question and that request, on one \
line, and nothing else.

Question: {question}"""

PROMPTS = {"rephrase": REPHRASE, "translate": TRANSLATE}

LATIN = ("LATIN",)
#: language code -> (English name, the Unicode scripts its text is written in): the languages ``translate``
#: knows. A code with a region ("pt-BR") uses its language's entry.
LANGUAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ar": ("Arabic", ("ARABIC",)), "bg": ("Bulgarian", ("CYRILLIC",)), "bn": ("Bengali", ("BENGALI",)),
    "cs": ("Czech", LATIN), "da": ("Danish", LATIN), "de": ("German", LATIN), "el": ("Greek", ("GREEK",)),
    "es": ("Spanish", LATIN), "fa": ("Persian", ("ARABIC",)), "fi": ("Finnish", LATIN), "fr": ("French", LATIN),
    "he": ("Hebrew", ("HEBREW",)), "hi": ("Hindi", ("DEVANAGARI",)), "hu": ("Hungarian", LATIN),
    "id": ("Indonesian", LATIN), "it": ("Italian", LATIN), "ja": ("Japanese", ("CJK", "HIRAGANA", "KATAKANA")),
    "ko": ("Korean", ("HANGUL",)), "nl": ("Dutch", LATIN), "no": ("Norwegian", LATIN), "pl": ("Polish", LATIN),
    "pt": ("Portuguese", LATIN), "ro": ("Romanian", LATIN), "ru": ("Russian", ("CYRILLIC",)),
    "sv": ("Swedish", LATIN), "sw": ("Swahili", LATIN), "th": ("Thai", ("THAI",)), "tr": ("Turkish", LATIN),
    "uk": ("Ukrainian", ("CYRILLIC",)), "vi": ("Vietnamese", LATIN), "zh": ("Chinese", ("CJK",)),
}
#: ``--languages`` when not given: eleven languages, as many as the study used (it does not list them).
DEFAULT_LANGUAGES = ("fr", "de", "es", "it", "pt", "nl", "pl", "ru", "zh", "ja", "ar")


def prompt_sha256(task: str) -> str:
    """sha256 of the task's prompt template (UTF-8)."""
    return hashlib.sha256(PROMPTS[task].encode("utf-8")).hexdigest()


def rephrase_prompt(question: str, n: int) -> str:
    return REPHRASE.format(n=n, question=question.strip())


def _entry(code: str) -> tuple[str, tuple[str, ...]]:
    primary = code.split("-")[0]
    if primary not in LANGUAGES:
        raise ValueError(f"unknown language {code!r} (known: {', '.join(sorted(LANGUAGES))})")
    return LANGUAGES[primary]


def language_name(code: str) -> str:
    """The English name of a language code, with its region: ``fr`` -> French, ``pt-BR`` -> Portuguese (BR)."""
    name = _entry(code)[0]
    region = code.split("-", 1)[1] if "-" in code else ""
    return f"{name} ({region})" if region else name


def language_script(code: str) -> tuple[str, ...]:
    """The Unicode scripts (the first word of a letter's Unicode name) the language is written in."""
    return _entry(code)[1]


def translate_prompt(question: str, code: str) -> str:
    return TRANSLATE.format(language=language_name(code), question=question.strip())
