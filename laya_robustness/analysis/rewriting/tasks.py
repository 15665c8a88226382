"""The two variant tasks: what each asks the language model for one row, and which of its texts it keeps.

- :class:`Rephrase`: one prompt per row asking for ``n`` rephrasings; its candidates are checked in
  order until ``n`` are kept. Kept: a list of strings, the ``rephrasings`` of a ``--rephrasings`` line.
- :class:`Translate`: one prompt per row and language; each response gives one candidate. Kept: a mapping
  language -> text, the ``translations`` of a ``--translations`` line.

A reject is ``{"text", "reason"}`` (and ``"language"`` for a translation), reasons from
:data:`~laya_robustness.analysis.rewriting.checks.REASONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from laya_robustness.analysis.rewriting.checks import (check_rephrasing, check_translation, rephrase_candidates,
                                                      translation_candidate)
from laya_robustness.analysis.rewriting.prompts import rephrase_prompt, translate_prompt
from laya_robustness.families.rephrase import TRANSLATIONS_KEY, USER_KEY
from laya_robustness.rows import Row


@dataclass(frozen=True)
class Rephrase:
    """``n`` rephrasings per question."""

    n: int = 10
    name = "rephrase"
    key = USER_KEY
    max_new_tokens = 512

    def settings(self) -> dict[str, Any]:
        return {"n": self.n}

    def prompts(self, row: Row) -> list[str]:
        return [rephrase_prompt(row.question, self.n)]

    def settle(self, row: Row, responses: Sequence[str]) -> tuple[list[str], list[dict]]:
        kept: list[str] = []
        rejects = []
        for text in rephrase_candidates(responses[0]):
            reason = "extra" if len(kept) == self.n else check_rephrasing(text, row, kept)
            if reason is None:
                kept.append(text)
            else:
                rejects.append({"text": text, "reason": reason})
        return kept, rejects


@dataclass(frozen=True)
class Translate:
    """One translation per question and language, each asking for an answer in English."""

    languages: tuple[str, ...]
    name = "translate"
    key = TRANSLATIONS_KEY
    max_new_tokens = 128

    def settings(self) -> dict[str, Any]:
        return {"languages": list(self.languages)}

    def prompts(self, row: Row) -> list[str]:
        return [translate_prompt(row.question, language) for language in self.languages]

    def settle(self, row: Row, responses: Sequence[str]) -> tuple[dict[str, str], list[dict]]:
        kept: dict[str, str] = {}
        rejects = []
        for language, response in zip(self.languages, responses):
            text = translation_candidate(response)
            reason = check_translation(text, row, language, list(kept.values()))
            if reason is None:
                kept[language] = text
            else:
                rejects.append({"language": language, "text": text, "reason": reason})
        return kept, rejects
