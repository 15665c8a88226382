"""The scoring journal: every record appended and flushed as it is scored, keyed by what it depends on.

A run writes ``<report-dir>/journal/<device>[.<worker>].<run>.jsonl``, one line per scored row:
``{"key": ..., "record": {...}}``. The key is the sha256 of the run's scoring configuration
(model weight hashes, scorer, precision, scoring path, batch size, temperatures) and the row's own
content (ids, family, variant, question, options, display order, label, context, meta and the pixels
of its images), so a record is reused only for exactly the row and configuration it was scored with,
whatever the seed that built the row. ``--resume`` reads every journal of the journal folder
(``--journal``, by default ``<report-dir>/journal``) and scores only the rows it lacks; a line cut
short by a killed process is ignored (so only its row is scored again). Each process of each run appends
to a file of its own (``<run>`` is the run's token), so several runs can share a ``--journal`` folder:
no two processes ever append to one file, and a resumed run never appends after a torn line. Rows are
scored in the same batches as a fresh run's except where a chunk is partly journaled; on the CPU with
eager attention a row's logits do not depend on its batch (the invariance conditions check it), so the
result is the same.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "cpu.jsonl"
>>> j = Journal(path, "config", {})
>>> j.append([("k1", {"row_id": "a"})])
>>> sorted(read_journals(path.parent))
['k1']
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from laya_robustness.rows import image_digest
from laya_robustness.run.errors import HarnessError
from laya_robustness.run.files import file_safe

JOURNAL_DIR = "journal"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def config_fingerprint(identity: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """What every record of a run depends on besides its row: the scorer's identity (the weights' hashes, its
    prompt format and template, a plug-in's own fields such as a planted regression) and the scoring
    settings. The model's name or path is left out when the weights are hashed, so the same weights
    moved elsewhere keep their records.

    >>> a = {"model": "/a/ckpt", "weights_sha256": {"model.safetensors": "1f"}, "chat_template_sha256": "9c"}
    >>> config_fingerprint(a, {}) == config_fingerprint({**a, "model": "/b/ckpt"}, {})
    True
    >>> config_fingerprint(a, {}) == config_fingerprint({**a, "planted": {"rate": 0.05, "seed": 1}}, {})
    False
    """
    kept = {k: v for k, v in identity.items() if k != "model"} if identity.get("weights_sha256") else dict(identity)
    return _digest({"identity": kept, **settings})


def row_key(config: str, row) -> str:
    """The journal key of one row under one configuration (see the module doc)."""
    h = hashlib.sha256(config.encode())
    fields = [row.row_id, row.dataset, row.group_id, row.cluster, row.family, row.variant, row.question,
              list(row.options), row.display_order, row.label, row.primitive, row.context,
              list(getattr(row, "answers", ())), row.meta]
    h.update(json.dumps(fields, sort_keys=True, default=str).encode("utf-8"))
    for image in row.images:  # sha256 of mode, size and pixels, computed once per image the scorer also keys on
        h.update(image_digest(image).encode())
    return h.hexdigest()


def read_journals(folder: Path) -> dict[str, dict]:
    """key -> record of every complete line of every journal in ``folder`` (a torn last line is skipped)."""
    out: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("*.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as fh:  # a torn multi-byte character: that line only
            for line in fh:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short when the process was killed
                if isinstance(entry, dict) and "key" in entry and isinstance(entry.get("record"), dict):
                    out[entry["key"]] = entry["record"]
    return out


class Journal:
    """Appends scored records to one journal file; ``known`` holds the records of earlier runs to reuse."""

    def __init__(self, path: Path, config: str, known: Mapping[str, dict]):
        self.path, self.config, self.known = Path(path), config, dict(known)

    def append(self, entries: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Write ``(key, record)`` lines and flush them to the operating system at once; a failure to write (a full
        disk, a folder made read-only) is a ``HarnessError`` naming the journal."""
        lines = [json.dumps({"key": k, "record": r}, sort_keys=True, separators=(",", ":")) + "\n" for k, r in entries]
        if not lines:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write("".join(lines))
                fh.flush()
        except OSError as exc:
            raise HarnessError(f"cannot append to the scoring journal {self.path}: {exc.strerror or exc}") from exc


def open_journal(folder: Path, key: str, worker: str | None, identity: Mapping[str, Any], settings: Mapping[str, Any],
                 resume: bool, run: str) -> Journal:
    """The journal one process of run ``run`` (its token) appends the records of one scorer (``key``: its device
    and source) to: ``<folder>/<key>[.<worker>].<run>.jsonl``, knowing every record of the folder's journals
    when ``resume``."""
    name = file_safe(key) + (f".{worker}" if worker else "") + f".{file_safe(run)}"
    known = read_journals(folder) if resume else {}
    return Journal(Path(folder) / f"{name}.jsonl", config_fingerprint(identity, settings), known)
