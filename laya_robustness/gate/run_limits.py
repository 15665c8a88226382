"""The limits of one run: the limits file with its overlay of known limitations (which overlay:
``run.inputs.resolution``), validated against the declared families' checks, and the regression limits against a
baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from laya_robustness.families import compares_flips, declared
from laya_robustness.gate.limits_file import Gate, Thresholds, load_thresholds


def run_limits(thresholds: str | Path, *, datasets: Iterable[str], conditions: Iterable[str],
               limitations: str | Path | None = None) -> Thresholds:
    """``thresholds`` with the ``limitations`` overlay (or none), validated against every declared family's
    checks, ``datasets`` and the invariance ``conditions``; raises ThresholdsError naming file and key."""
    return load_thresholds(thresholds, families={f.name: f.checks for f in declared()}, datasets=list(datasets),
                           conditions=tuple(conditions), overlays=[limitations] if limitations else [])


def regression_limits(gate: Gate, family: str, cell: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The limits a family is held to against a --baseline (``gate``: the limits file's [gate]):
    ``max_regression`` (accuracy) for every family, ``max_flip_regression`` (flip rate) too for a
    meaning-preserving one. With its baseline ``cell``, only the limits it has groups for; a limit the
    file unsets is left out."""
    limits = {"max_regression": gate.max_regression}
    if compares_flips(family):
        limits["max_flip_regression"] = gate.max_flip_regression
    if cell is not None:
        if not cell.get("n_groups"):
            limits.pop("max_regression")
        if not cell.get("n_flip_groups"):
            limits.pop("max_flip_regression", None)
    return {check: limit for check, limit in limits.items() if limit is not None}
