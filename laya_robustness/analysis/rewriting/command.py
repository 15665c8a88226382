"""``python -m laya_robustness variants rephrase|translate``: check the options, read the rows, load the language
model, write the files, and say what was kept and rejected."""

from __future__ import annotations

import sys
from pathlib import Path

from laya_robustness.analysis.rewriting.generator import ChatGenerator, TextGenerator
from laya_robustness.analysis.rewriting.pipeline import sibling, write_variants
from laya_robustness.analysis.rewriting.prompts import language_name
from laya_robustness.analysis.rewriting.tasks import Rephrase, Translate
from laya_robustness.families.rephrase import LANGUAGE_CODE
from laya_robustness.loaders import scan_rows
from laya_robustness.rows import Row
from laya_robustness.run.inputs.run_inputs import sample_rows

TASKS = ("rephrase", "translate")


def parse_languages(text: str) -> tuple[str, ...]:
    """Comma-separated language codes, each one :mod:`~laya_robustness.analysis.rewriting.prompts` knows, no repeats."""
    codes = tuple(c.strip() for c in text.split(",") if c.strip())
    if not codes:
        raise ValueError("--languages: give at least one language code, e.g. fr,de")
    for code in codes:
        if not LANGUAGE_CODE.fullmatch(code):
            raise ValueError(f"--languages: {code!r} is not a language code (lower-case ISO 639, e.g. fr or pt-BR)")
        try:
            language_name(code)
        except ValueError as exc:
            raise ValueError(f"--languages: {exc}") from None
    if len(set(codes)) != len(codes):
        raise ValueError(f"--languages: a language is given twice in {text!r}")
    return codes


def make_task(name: str, n: int, languages: str):
    """The task of ``name`` with its options checked (ValueError naming the option)."""
    if name == "rephrase":
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"--n must be at least 1, got {n}")
        return Rephrase(n)
    if name == "translate":
        return Translate(parse_languages(languages))
    raise ValueError(f"variants: the task must be one of {', '.join(TASKS)}, got {name!r}")


def question_rows(data: Path, rows_per_set: int, seed: int) -> list[Row]:
    """The rows of ``data`` (no pixels decoded), sampled as the gate samples them, datasets in name order."""
    scanned = scan_rows(data)
    return [s.row for _, rows in sorted(scanned.items()) for s in sample_rows(rows, rows_per_set, seed)]


def _progress(done: int, total: int) -> None:
    if done == total or done % max(1, total // 10) == 0:
        print(f"variants: {done}/{total} rows", file=sys.stderr)


def run_variants(task: str, *, model: str, data: Path, out: Path, n: int = 10, languages: str = "",
                 batch_size: int = 8, max_new_tokens: int | None = None, device: str = "cpu", rows_per_set: int = 0,
                 seed: int = 0, generator: TextGenerator | None = None) -> int:
    """Write the variants file of ``task`` for the rows of ``data`` into ``out`` and print its counts; 0 when done.

    Bad options and data raise ValueError / RowError before the model is loaded; a model that cannot load
    raises ModelLoadError. ``generator`` stands in for the model (tests)."""
    spec = make_task(task, n, languages)
    for flag, value in (("--batch-size", batch_size), ("--max-new-tokens", max_new_tokens)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    if rows_per_set < 0:
        raise ValueError(f"--rows-per-set must be 0 (every row) or more, got {rows_per_set}")
    if not str(out).endswith(".jsonl"):
        raise ValueError(f"--out: {out} must name a .jsonl file (the rejects and counts go beside it)")
    rows = question_rows(data, rows_per_set, seed)
    generator = generator or ChatGenerator.from_pretrained(model, device)
    stats = write_variants(spec, generator, rows, out, batch_size=batch_size, max_new_tokens=max_new_tokens,
                           progress=_progress)
    print(summary_line(stats, out))
    return 0


def summary_line(stats: dict, out: Path) -> str:
    """What a run kept and rejected, in one line."""
    reasons = ", ".join(f"{reason} {count}" for reason, count in stats["rejected"].items()) or "none"
    return (f"wrote {out}: {stats['n_kept']} {stats['task']} variant(s) kept for {stats['n_rows_with_variants']} of "
            f"{stats['n_rows']} rows; {stats['n_rejected']} rejected ({reasons}), listed in "
            f"{sibling(out, 'rejects.jsonl')}")
