"""A draft of the known limitations of the weights one run gated (``python -m laya_robustness limitations REPORTS
--out FILE``), for a new checkpoint whose misses are not the old weights'.

Known limitations belong to weights: an overlay's ``[measured_on] weights_sha256`` names the weights it was measured
on, and ``--limitations auto`` applies the embedded default's only to those. A new checkpoint is therefore judged on
every check, and the checks its predecessor was known to miss fail again until they are declared for the new
weights. The draft is an overlay (``thresholds.toml``'s schema, read by ``gate.limits_file``) holding:

- ``[measured_on] weights_sha256``: the run's ``meta.model.weights_sha256``, as summary.json records it;
- one ``[[known_limitations]]`` per check that failed in the run's ``checks.json`` (``decision == "fail"``, known or
  not), its ``reason`` the check's own detail (value, interval, limit), marked as a draft for a person to replace
  with why these weights miss it.

It is read back through the gate's own reader of limits and overlays before it is written, so a draft that the gate
would refuse is never written. A run that names no weights (a served model) cannot have its limitations declared:
refused, as is an existing ``--out`` unless ``replace``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

from laya_robustness.report.read_back import ReportFolder, read_folder
from laya_robustness.report.render import load_limits
from laya_robustness.run.files import atomic_write

#: What every drafted reason starts with, so a reviewer sees which reasons still need a person's words.
DRAFTED = "DRAFT, say why these weights miss it:"


def _string(value: Any) -> str:
    """A TOML basic string: JSON's escaping with every non-ASCII character as ``\\uXXXX`` is valid TOML."""
    return json.dumps(str(value), ensure_ascii=True)


def failed_checks(results: list) -> list[dict]:
    """The results of ``checks.json`` whose decision is "fail", in family, dataset, check order."""
    failed = [r for r in results if r.get("decision") == "fail"]
    return sorted(failed, key=lambda r: (str(r["family"]), str(r["dataset"]), str(r["check"])))


def weights_of(summary: Mapping[str, Any], folder: Path) -> dict[str, str]:
    """The run's ``meta.model.weights_sha256``; ValueError when it names none."""
    weights = (summary.get("meta", {}).get("model") or {}).get("weights_sha256")
    if not isinstance(weights, dict) or not weights:
        raise ValueError(f"{folder / 'summary.json'}: meta.model.weights_sha256 names no weights (a served model's "
                         "run does not know them), and known limitations belong to weights: gate the checkpoint in "
                         "process to draft them")
    return {str(k): str(v) for k, v in sorted(weights.items())}


def draft(report: ReportFolder) -> tuple[str, int]:
    """The overlay text for the run read back in ``report`` and the number of known limitations it declares."""
    folder = report.folder
    weights = weights_of(report.summary, folder)
    failed = failed_checks(report.results or [])
    meta = report.summary["meta"]
    model = (meta.get("model") or {}).get("model", "?")
    lines = [f"# Known limitations of the weights gated in {_string(folder)} (model {_string(model)}),",
             "# drafted from its checks.json: each reason is the check's own detail until a person says why.",
             "", "version = 1", "", "[measured_on]",
             "weights_sha256 = { " + ", ".join(f"{_string(k)} = {_string(v)}" for k, v in weights.items()) + " }"]
    for result in failed:
        lines += ["", "[[known_limitations]]", f"family = {_string(result['family'])}",
                  f"dataset = {_string(result['dataset'])}", f"check = {_string(result['check'])}",
                  f"reason = {_string(DRAFTED + ' ' + str(result.get('detail') or 'failed'))}"]
    return "\n".join(lines) + "\n", len(failed)


def write_draft(folder: str | Path, out: str | Path, thresholds: str | Path = "thresholds.toml",
                replace: bool = False) -> int:
    """Write the draft of ``folder``'s run to ``out`` after reading it back as the gate would (with ``thresholds``,
    the limits file the run was judged with); the number of known limitations written."""
    out = Path(out)
    if out.exists() and not replace:
        raise ValueError(f"--out: {out} exists (pass --replace to write over it)")
    report = read_folder(folder, checks=True)
    text, count = draft(report)
    with tempfile.TemporaryDirectory() as scratch:
        trial = Path(scratch) / out.name
        trial.write_text(text, encoding="utf-8")
        load_limits(report.summary, thresholds, trial)
    atomic_write(out, text)
    return count
