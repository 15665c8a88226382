"""One variants run: every row's prompts through the generator in fixed batches, each text checked, journaled as it
comes, and at the end the files ``--rephrasings`` / ``--translations`` read, with the rejects and counts beside them.

For ``--out F.jsonl`` it writes (each atomically, once every row is done):

- ``F.jsonl``: one line per row with at least one kept variant, in row order:
  ``{"row_id", "dataset", "rephrasings": [...]}`` or ``{..., "translations": {code: text}}``, and
  ``"provenance"``: the task, the generator's identity (model, weights hash, ...), the prompt's sha256
  and the generation settings;
- ``F.rejects.jsonl``: one line per row with a rejected text: ``{"row_id", "dataset", "rejects": [...]}``;
- ``F.stats.json``: rows, rows with variants, texts kept and rejected, rejects by reason, the provenance.

Rows are cut into fixed units (``batch_size`` prompts' worth of rows) and each unit's results are
appended to ``F.journal.jsonl`` and synced before the next unit starts. A run that is stopped and
started again with the same command reuses every unit the journal holds whole and redoes the others
in the same batches, so its files are byte for byte those of a run that was never stopped; the journal
is removed when the files are written. A run is refused (ValueError) when ``F.jsonl`` or its journal
comes from another generator, prompt, task setting or set of rows, so files never mix them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from laya_robustness.analysis.rewriting.checks import REASONS
from laya_robustness.analysis.rewriting.generator import TextGenerator
from laya_robustness.analysis.rewriting.prompts import prompt_sha256
from laya_robustness.rows import Row
from laya_robustness.run.files import atomic_write


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _sha256(value: Any) -> str:
    return hashlib.sha256(_dumps(value).encode("utf-8")).hexdigest()


def sibling(out: Path, suffix: str) -> Path:
    """``F.<suffix>`` beside ``F.jsonl`` (``F.rejects.jsonl``, ``F.stats.json``, ``F.journal.jsonl``)."""
    stem = out.name[:-len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{stem}.{suffix}")


def _row_content(row: Row) -> list:
    return [row.dataset, row.row_id, row.question, list(row.options), row.label, list(row.answers), row.primitive]


def provenance(task, generator: TextGenerator, batch_size: int, max_new_tokens: int) -> dict:
    """What every line records of how it was made."""
    return {"task": task.name, "generator": dict(generator.identity), "prompt_sha256": prompt_sha256(task.name),
            "settings": {**task.settings(), "decoding": "greedy", "batch_size": batch_size,
                         "max_new_tokens": max_new_tokens}}


def units(rows: Sequence[Row], task, batch_size: int) -> list[list[Row]]:
    """The fixed row units of a run: as many rows as fill ``batch_size`` prompts (at least one)."""
    per_row = max(1, len(task.prompts(rows[0]))) if rows else 1
    size = max(1, batch_size // per_row)
    return [list(rows[i:i + size]) for i in range(0, len(rows), size)]


class _Journal:
    """``F.journal.jsonl``: a header with the run's fingerprint, then ``{"key", "kept", "rejects"}`` per row."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.fingerprint = path, fingerprint

    def read(self, what: str) -> dict[str, dict]:
        if not self.path.is_file():
            return {}
        entries: dict[str, dict] = {}
        with self.path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short when the run was stopped
                if i == 0 and entry.get("fingerprint") != self.fingerprint:
                    raise ValueError(f"--out: {self.path} is the journal of another run (another generator, "
                                     f"prompt, setting or set of rows than this {what}); remove it to start over")
                if i > 0 and isinstance(entry, dict) and "key" in entry:
                    entries[entry["key"]] = entry
        return entries

    def _torn(self) -> bool:
        with self.path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"

    def append(self, entries: Sequence[Mapping[str, Any]]) -> None:
        fresh = not self.path.is_file() or self.path.stat().st_size == 0
        head = _dumps({"fingerprint": self.fingerprint}) + "\n" if fresh else "\n" if self._torn() else ""
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(head + "".join(_dumps(e) + "\n" for e in entries))
            fh.flush()
            os.fsync(fh.fileno())


def _refuse_foreign(out: Path, fingerprint: str) -> bool:
    """True when ``out`` is this run's finished output; ValueError when it is another run's."""
    stats_path = sibling(out, "stats.json")
    if not out.exists():
        return False
    stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else {}
    if stats.get("fingerprint") != fingerprint:
        raise ValueError(f"--out: {out} already holds variants of another run (another generator, prompt, "
                         "setting or set of rows); remove it or choose another --out")
    return True


def _generate(task, generator: TextGenerator, unit: Sequence[Row], batch_size: int, max_new_tokens: int) -> list:
    prompts = [task.prompts(row) for row in unit]
    flat = [p for row_prompts in prompts for p in row_prompts]
    responses: list[str] = []
    for i in range(0, len(flat), batch_size):
        batch = flat[i:i + batch_size]
        got = generator.generate(batch, max_new_tokens)
        if len(got) != len(batch):
            raise RuntimeError(f"the generator returned {len(got)} texts for {len(batch)} prompts")
        responses += got
    out, start = [], 0
    for row, row_prompts in zip(unit, prompts):
        out.append(task.settle(row, responses[start:start + len(row_prompts)]))
        start += len(row_prompts)
    return out


def _finish(task, rows: Sequence[Row], keys: Sequence[str], done: Mapping[str, dict], out: Path,
            prov: dict, fingerprint: str) -> dict:
    lines, rejects, reasons = [], [], Counter()
    n_kept = 0
    for row, key in zip(rows, keys):
        entry = done[key]
        if entry["kept"]:
            lines.append({"row_id": row.row_id, "dataset": row.dataset, task.key: entry["kept"], "provenance": prov})
            n_kept += len(entry["kept"])
        if entry["rejects"]:
            rejects.append({"row_id": row.row_id, "dataset": row.dataset, "rejects": entry["rejects"]})
            reasons.update(r["reason"] for r in entry["rejects"])
    stats = {"task": task.name, "fingerprint": fingerprint, "provenance": prov, "n_rows": len(rows),
             "n_rows_with_variants": len(lines), "n_kept": n_kept, "n_rejected": sum(reasons.values()),
             "rejected": {r: reasons[r] for r in REASONS if reasons[r]},
             "rejects_file": sibling(out, "rejects.jsonl").name}
    atomic_write(out, "".join(_dumps(line) + "\n" for line in lines))
    atomic_write(sibling(out, "rejects.jsonl"), "".join(_dumps(line) + "\n" for line in rejects))
    atomic_write(sibling(out, "stats.json"), json.dumps(stats, ensure_ascii=False, indent=2, sort_keys=True) + "\n")
    return stats


def write_variants(task, generator: TextGenerator, rows: Sequence[Row], out: str | Path, *, batch_size: int = 8,
                   max_new_tokens: int | None = None, progress: Callable[[int, int], None] | None = None) -> dict:
    """Generate, check and write the variants of ``rows`` (module doc); returns the stats. ``progress(done, total)``
    is called after each unit."""
    out = Path(out)
    max_new_tokens = max_new_tokens or task.max_new_tokens
    prov = provenance(task, generator, batch_size, max_new_tokens)
    fingerprint = _sha256({"provenance": prov, "rows": [_row_content(r) for r in rows]})
    if _refuse_foreign(out, fingerprint):
        return json.loads(sibling(out, "stats.json").read_text(encoding="utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    journal = _Journal(sibling(out, "journal.jsonl"), fingerprint)
    done = journal.read(task.name)
    keys = {id(row): _sha256([fingerprint, _row_content(row)]) for row in rows}
    finished = 0
    for unit in units(rows, task, batch_size):
        if not all(keys[id(r)] in done for r in unit):  # a unit is reused whole or made again whole
            results = _generate(task, generator, unit, batch_size, max_new_tokens)
            entries = [{"key": keys[id(r)], "kept": kept, "rejects": rej} for r, (kept, rej) in zip(unit, results)]
            journal.append(entries)
            done.update({e["key"]: e for e in entries})
        finished += len(unit)
        if progress:
            progress(finished, len(rows))
    stats = _finish(task, rows, [keys[id(r)] for r in rows], done, out, prov, fingerprint)
    journal.path.unlink(missing_ok=True)
    return stats
