"""JSONL manifests: one JSON object per line, image paths relative to the file; bytes checked as UTF-8 per line.

A manifest is read to its end: a line that is not a JSON object, and a row with problems, is kept as problems
(``loaders.problems``) and the next line read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from laya_robustness.loaders.fixes import NOT_UTF8, TOO_LONG
from laya_robustness.loaders.image_refs import Where
from laya_robustness.loaders.problems import Problems
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.loaders.validate import SourceRow, manifest_row
from laya_robustness.rows import RowError

BOM = b"\xef\xbb\xbf"
#: The longest line read (a row's text fields hold at most validate.MAX_TEXT_CHARS characters each): a longer one is
#: refused before it is parsed.
MAX_LINE_BYTES = 16 << 20


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _undecoded(text: str) -> bool:
    """Whether ``text`` holds a byte that was not UTF-8 (decoded with surrogateescape)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _bad_field(value: Any, path: str = "") -> str | None:
    """The field (``question``, ``options[1]``) whose text holds an undecodable byte; ``<json>`` for a key."""
    if isinstance(value, str):
        return (path or "<json>") if _undecoded(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _undecoded(key):
                return "<json>"
            found = _bad_field(item, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _bad_field(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _parse(raw: bytes, where: Where) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        field_name = "<json>"
        try:
            field_name = _bad_field(json.loads(raw.decode("utf-8", "surrogateescape"))) or "<json>"
        except (ValueError, RecursionError):
            pass
        raise where.error(field_name, f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the "
                                      f"line", NOT_UTF8) from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise where.error(exc.key, "given twice in one object") from None
    except json.JSONDecodeError as exc:
        raise where.error("<json>", str(exc)) from None
    except RecursionError:
        raise where.error("<json>", "nested too deeply") from None


def _lines(fh) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of every line of ``fh``; None for a line over MAX_LINE_BYTES, skipped unread."""
    line_no = 0
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        line_no += 1
        if len(raw) <= MAX_LINE_BYTES:
            yield line_no, raw
            continue
        while raw and not raw.endswith(b"\n"):  # the rest of the long line, a bounded piece at a time
            raw = fh.readline(MAX_LINE_BYTES + 1)
        yield line_no, None


def _object(raw: bytes | None, where: Where) -> dict:
    """The JSON object of one line (RowError naming the line and field otherwise)."""
    if raw is None:
        raise where.error("<json>", f"a line over {MAX_LINE_BYTES:,} bytes, the limit of one line", TOO_LONG)
    record = _parse(raw, where)
    if not isinstance(record, dict):
        raise where.error("<json>", f"expected an object, got {type(record).__name__}")
    return record


def json_objects(path: str | Path, problems: Problems | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file, in order: a leading BOM is skipped,
    each line is checked as UTF-8, and a line that is not one JSON object (or gives a key twice) is a
    RowError naming the file, line and field; a line over MAX_LINE_BYTES is refused unread. With ``problems``
    such a line is kept there and the next one read. Every JSONL reader of the project reads through it."""
    path = Path(path)
    with path.open("rb") as fh:
        for line_no, raw in _lines(fh):
            if line_no == 1 and raw is not None and raw.startswith(BOM):
                raw = raw[len(BOM):]
            if raw is not None and not raw.strip():
                continue
            try:
                record = _object(raw, Where(path, line_no))
            except RowError as exc:
                if problems is None:
                    raise
                problems.add(exc)
                continue
            yield line_no, record


def read_jsonl(path: Path, data_root: Path, settings: LoadSettings, problems: Problems) -> Iterator[SourceRow]:
    """The good rows of one manifest, in file order (blank lines skipped); every bad line's problems go to
    ``problems``."""
    for line_no, record in json_objects(path, problems):
        try:
            row = manifest_row(record, path.parent, data_root, path, line_no, settings)
        except RowError as exc:
            problems.add(exc)
            continue
        yield row
