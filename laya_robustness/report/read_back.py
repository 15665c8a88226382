"""A run's report folder read back (``compare``, ``trend``, ``report``): each file's shape checked before anything uses
it, and the summary checked against the predictions it was made from.

- ``summary.json`` (and ``checks.json``): at most ``MAX_JSON_BYTES``, arrays and objects nested at most
  ``MAX_NESTING`` deep (counted on the text, before it is parsed), UTF-8 JSON. A summary is an object with a
  ``meta`` and a ``bootstrap`` object; each block ``{family: {dataset: cell}}``; every number in a block finite
  (NaN or infinity is refused, never compared); each headline a number or null, its interval null or
  ``[low, high]``. ``checks.json``'s ``results`` is a list of ``{family, dataset, check, decision}``.
- ``predictions.jsonl.gz``: a readable gzip of valid records (``predictions.read_predictions``), at least one.
- The summary is a pure function of the predictions (``summary.summarize``): every block is made again from the
  records with the summary's own bootstrap and must equal the summary's, the same cells, row counts and numbers
  (at most one unit of the 6th decimal apart), or the folder is refused naming both files.

Every refusal is a ValueError (FileNotFoundError for a missing file) naming the file and what is wrong; ``python -m
laya_robustness`` exits 4 on it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laya_robustness.families import blocks, declared
from laya_robustness.predictions import read_predictions
from laya_robustness.records import Record
from laya_robustness.summary import STABILITY_ANALYSIS, CellCache, summarize

SUMMARY, CHECKS, PREDICTIONS = "summary.json", "checks.json", "predictions.jsonl.gz"
#: The largest summary.json or checks.json read (a summary takes about 2 KiB a cell: this is 100,000 cells).
MAX_JSON_BYTES = 256 << 20
#: The deepest nesting of arrays and objects read (a gate's summary nests a few levels deep).
MAX_NESTING = 64
#: The numbers a report shows of any cell, besides its family's headlines (``report.cell_rows.columns_of``).
SHOWN = ("acc", "delta", "flip", "ece")
#: How far a recomputed number may lie from the summary's: one unit of the 6 decimals a summary keeps.
TOLERANCE = 1.5e-6
_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


@dataclass(frozen=True)
class ReportFolder:
    """One run's report folder read back: its summary, its checks' results (None unless asked for), its prediction
    records, the cells made from them (``summary.CellCache``: a later ``summarize`` of the records reuses them) and
    checks.json's meta (empty unless asked for)."""

    folder: Path
    summary: dict
    results: list | None
    records: list[Record]
    cache: CellCache = field(default_factory=CellCache, compare=False, repr=False)
    checks_meta: dict = field(default_factory=dict)


def _too_deep(text: str) -> bool:
    depth = 0
    for match in _BRACKETS.finditer(text):
        token = match.group()
        depth += 1 if token in ("[", "{") else -1 if token in ("]", "}") else 0
        if depth > MAX_NESTING:
            return True
    return False


def _a_file(path: Path) -> None:
    """FileNotFoundError unless ``path`` is a regular file (or a link to one): a FIFO or a device is never read."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file, or not a regular file (give the file a gate run wrote)")


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in ``path`` within the module's bounds; ValueError ``<path>: not a <what> the gate wrote:
    <why>`` otherwise."""
    _a_file(path)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise not_the_gates(path, what, f"{size:,} bytes, over the limit of {MAX_JSON_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_the_gates(path, what, f"not UTF-8 ({exc})") from None
    if _too_deep(text):
        raise not_the_gates(path, what, f"arrays or objects nested over {MAX_NESTING} deep")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise not_the_gates(path, what, str(exc)) from None
    if not isinstance(data, dict):
        raise not_the_gates(path, what, f"a JSON {type(data).__name__} where an object is")
    return data


def not_the_gates(path: Path, what: str, why: str) -> ValueError:
    """The refusal of a report file: what is wrong, and how to make it again."""
    again = (f"make it again from its predictions: python -m laya_robustness summarize {path.parent / PREDICTIONS} "
             f"--out {path}") if what == SUMMARY else "run the gate again to that folder"
    return ValueError(f"{path}: not a {what} the gate wrote: {why}; give the folder a gate run wrote, or {again}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_finite(value: Any, where: str) -> str | None:
    """The key path of the first NaN or infinity in ``value``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((found for key, v in items if (found := _non_finite(v, f"{where}.{key}"))), None)


def _shape_error(summary: dict) -> str | None:
    """What makes ``summary`` not the shape of a summary (see the module doc), or None."""
    return _meta_error(summary) or _blocks_error(summary) or _headline_error(summary)


def _meta_error(summary: dict) -> str | None:
    """What is wrong with the meta and bootstrap objects (what ``compare`` and ``trend`` read of them), or None."""
    for key in ("meta", "bootstrap"):
        if not isinstance(summary.get(key), dict):
            return f"no {key} object"
    boot, meta = summary["bootstrap"], summary["meta"]
    if not all(_integer(boot.get(k)) for k in ("seed", "n_boot", "n_boot_ece")):
        return f"bootstrap is not {{seed, n_boot, n_boot_ece}} integers: {_shown(boot)}"
    if "seed" in meta and not _integer(meta["seed"]):
        return f"meta.seed is {_shown(meta['seed'])}, not an integer"
    scope = meta.get("scope", {})
    if not (isinstance(scope, dict) and isinstance(scope.get("not_judged", {}), dict)
            and all(isinstance(v, list) for v in scope.get("not_judged", {}).values())):
        return f"meta.scope is not {{not_judged: {{family: [dataset]}}, ...}}: {_shown(scope)}"
    return None


def _blocks_error(summary: dict) -> str | None:
    """A block that is not ``{family: {dataset: cell}}`` or holds a NaN or infinity, or None."""
    for block in [b for b in blocks() if b in summary]:
        cells = summary[block]
        if not (isinstance(cells, dict) and all(isinstance(c, dict) and all(isinstance(v, dict) for v in c.values())
                                                for c in cells.values())):
            return f"{block} is not {{family: {{dataset: cell}}}}"
        bad = _non_finite(cells, block)
        if bad:
            return f"{bad}, not a number a summary holds (an undefined statistic is null)"
    return None


def _headline_error(summary: dict) -> str | None:
    """What makes a shown number of ``summary`` (a headline, ``acc`` / ``delta`` / ``flip`` / ``ece``) not a number
    or null, its interval not null or ``[low, high]``, or a cell's probabilities note not text; or None."""
    headline = {f.name: f.headline_keys for f in declared()}
    for block in [b for b in blocks() if b in summary]:
        for family, cells in summary[block].items():
            for dataset, cell in cells.items():
                where = f"{block}.{family}.{dataset}"
                if not isinstance(cell.get("probabilities", ""), str):
                    return f"{where}.probabilities is {_shown(cell['probabilities'])}, not text"
                for key in dict.fromkeys([*headline.get(family, ()), *SHOWN]):
                    value, ci = cell.get(key), cell.get(f"{key}_ci")
                    if value is not None and not _number(value):
                        return f"{where}.{key} is {_shown(value)}, not a number or null"
                    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(map(_number, ci))
                                               and ci[0] <= ci[1]):
                        return f"{where}.{key}_ci is {_shown(ci)}, not null or [low, high]"
    return None


def read_summary(path: str | Path) -> dict:
    """A summary.json, its shape checked (see the module doc)."""
    path = Path(path)
    summary = read_json_object(path, SUMMARY)
    why = _shape_error(summary)
    if why:
        raise not_the_gates(path, SUMMARY, why)
    return summary


def read_results(path: Path) -> list:
    """checks.json's results, each ``{family, dataset, check, decision}`` (text, the decision possibly null)."""
    return read_checks(path)[0]


def read_checks(path: Path) -> tuple[list, dict]:
    """checks.json's results (as ``read_results``) and its meta (an object; empty when it has none)."""
    checks = read_json_object(path, CHECKS)
    results, meta = checks.get("results"), checks.get("meta", {})
    if not isinstance(meta, dict):
        raise not_the_gates(path, CHECKS, "meta is not an object")
    fine = isinstance(results, list) and all(
        isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("family", "dataset", "check"))
        and isinstance(r.get("decision"), (str, type(None))) and isinstance(r.get("device"), (str, type(None)))
        for r in results)
    if not fine:
        raise not_the_gates(path, CHECKS, "results is not a list of {family, dataset, check, decision} objects")
    return results, meta


def read_records(path: Path) -> list[Record]:
    """The records of a predictions file (``predictions.read_predictions``), at least one."""
    _a_file(path)
    records = read_predictions(path)
    if not records:
        raise ValueError(f"{path}: holds no prediction record (an empty or cut-short file); give the "
                         f"{PREDICTIONS} a gate run wrote")
    return records


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _difference(theirs: Any, ours: Any, where: str) -> tuple[str, str, str] | None:
    """The first place where the summary's ``theirs`` and the recomputed ``ours`` differ: (key path, both shown)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for key in sorted(set(theirs) | set(ours)):
            if key not in theirs or key not in ours:
                return (f"{where}.{key}", _shown(theirs[key]) if key in theirs else "missing",
                        _shown(ours[key]) if key in ours else "missing")
            found = _difference(theirs[key], ours[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        return next((d for i, (a, b) in enumerate(zip(theirs, ours)) if (d := _difference(a, b, f"{where}[{i}]"))),
                    None)
    if _number(theirs) and _number(ours) and abs(theirs - ours) <= TOLERANCE:
        return None
    return None if theirs == ours else (where, _shown(theirs), _shown(ours))


def check_against_records(summary: dict, records: list[Record], summary_path: Path, predictions_path: Path,
                          cache: CellCache | None = None) -> None:
    """ValueError naming both files where a block of ``summary`` is not what ``records`` give (see the module doc)."""
    boot = summary["bootstrap"]
    made = summarize(records, seed=int(boot["seed"]), n_boot=int(boot["n_boot"]),
                     n_boot_ece=int(boot["n_boot_ece"]), cache=cache)
    made = json.loads(json.dumps(made))  # as a file holds it: lists, text keys
    names = (set(made) | (set(summary) & {*blocks(), STABILITY_ANALYSIS})) - {"meta", "bootstrap"}
    for name in sorted(names):
        found = _difference(summary.get(name, {}), made.get(name, {}), name)
        if found:
            where, theirs, ours = found
            raise ValueError(f"{summary_path} does not hold what {predictions_path} gives: {where} is {theirs} in "
                             f"the summary, {ours} from the records; a summary is made from its predictions: give "
                             f"the folder a gate run wrote, or make its summary again: python -m laya_robustness "
                             f"summarize {predictions_path} --out {summary_path}")


def read_folder(folder: str | Path, checks: bool = False) -> ReportFolder:
    """The report folder ``folder``: summary.json, checks.json when ``checks``, predictions.jsonl.gz, each checked,
    and the summary against the predictions (see the module doc). FileNotFoundError names the files missing."""
    folder = Path(folder)
    names = (SUMMARY, *((CHECKS,) if checks else ()), PREDICTIONS)
    missing = [name for name in names if not (folder / name).is_file()]
    summary = read_summary(folder / SUMMARY) if SUMMARY not in missing else {}  # a broken summary is named first
    if missing:
        raise FileNotFoundError(f"{folder}: no {', '.join(missing)} (give the folder a gate run reported to, such "
                                "as reports/ or robustness/checkpoint-500)")
    records, cache = read_records(folder / PREDICTIONS), CellCache()
    check_against_records(summary, records, folder / SUMMARY, folder / PREDICTIONS, cache)
    results, meta = read_checks(folder / CHECKS) if checks else (None, {})
    return ReportFolder(folder, summary, results, records, cache, meta)
