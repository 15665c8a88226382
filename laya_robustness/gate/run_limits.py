"""The limits of one run: the limits file with its overlay of known limitations (``auto``: the embedded
default's, when its rows and model are gated), validated against the declared families' checks, and the
regression limits against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from laya_robustness.embedded import EMBEDDED_LIMITATIONS, is_embedded
from laya_robustness.families import compares_flips, declared
from laya_robustness.gate.limits_file import Gate, Thresholds, ThresholdsError, load_thresholds, measured_on
from laya_robustness.weights import short_hashes, weight_hashes


def run_limits(thresholds: str | Path, *, datasets: Iterable[str], conditions: Iterable[str],
               limitations: str | Path | None = None) -> Thresholds:
    """``thresholds`` with the ``limitations`` overlay (or none), validated against every declared family's
    checks, ``datasets`` and the invariance ``conditions``; raises ThresholdsError naming file and key."""
    return load_thresholds(thresholds, families={f.name: f.checks for f in declared()}, datasets=list(datasets),
                           conditions=tuple(conditions), overlays=[limitations] if limitations else [])


def resolve_limitations(text: str, model: str | None, data: str | Path | None, root: Path | None = None,
                        weights: Mapping[str, str] | None = None) -> tuple[Path | None, str | None]:
    """The overlay a run applies and what the run says about it: ``none``; a file (applied as the user asked, with a
    note when its ``[measured_on]`` weights are not the gated model's); or ``auto``: the embedded default's overlay
    when its rows and model are the ones gated and the model's weights are those it was measured on (a note says
    why it is not applied when only the weights differ). ``weights``: the gated model's ``weights_sha256``, hashed
    from ``model``'s directory when not given; paths relative to ``root`` (default the
    working directory). Known limitations belong to weights, never to a path."""
    if text == "none":
        return None, None
    root = Path(root) if root is not None else Path()
    if text != "auto":
        path = Path(text) if Path(text).is_absolute() else root / text
        return path, _other_weights(path, model, weights, applied=True)
    if not (is_embedded("model", model, root) and is_embedded("data", data, root)):
        return None, None
    path = root / EMBEDDED_LIMITATIONS
    note = _other_weights(path, model, weights, applied=False)
    return (None, note) if note else (path, None)


def _other_weights(overlay: Path, model: str | None, weights: Mapping[str, str] | None, applied: bool) -> str | None:
    """What to say when ``overlay`` was measured on other weights than ``model``'s, or None (the same weights, or
    either unknown: an overlay without ``[measured_on]``, a model whose weights are not on this machine)."""
    try:
        measured = measured_on(overlay) if overlay.is_file() else None
    except ThresholdsError:
        return None  # the limits' own reading (before any work starts) names the file, line and key
    if measured is None:
        return None
    if weights is None:
        weights = weight_hashes(Path(model)) if model and Path(model).is_dir() else None
    if not weights or dict(weights) == measured:
        return None
    what = f"the known limitations in {overlay} were measured on other weights ({short_hashes(measured)}; this " \
           f"model: {short_hashes(weights)})"
    if applied:
        return f"{what}: applied, as --limitations names the file"
    return f"{what}: not applied, so each of their checks is judged on its own (--limitations {overlay} applies them)"


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
