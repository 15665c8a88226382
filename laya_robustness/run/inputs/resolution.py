"""Where a run's options meet the machine, in one place: the checkpoints they name (a local directory made
absolute, else a hub id), the known limitations a run applies (``auto``: the embedded default's, when its rows,
model and weights are the ones gated), and which of the run's model, rows and captions are the embedded
default's. Everything here may read the disk (paths, weight files); ``options`` declares and parses without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from laya_robustness.embedded import EMBEDDED_LIMITATIONS, is_embedded
from laya_robustness.gate.limits_file import ThresholdsError, measured_on
from laya_robustness.run.errors import UsageError
from laya_robustness.weights import short_hashes, weight_hashes

#: The settings whose value may be the embedded default's.
EMBEDDED_PARTS = ("model", "data", "captions")


@dataclass(frozen=True)
class Resolution:
    """What a run's options name on this machine: ``model`` and ``dual_model`` as every process loads them
    (None: a served model's endpoint picks, a model in memory, no dual encoder; ``dual_model`` may stay ``auto``),
    the ``limitations`` overlay applied and what the run says about it, and the ``embedded`` parts."""

    model: str | None
    dual_model: str | None
    limitations: Path | None
    limitations_note: str | None
    embedded: frozenset[str]
    journal_inside_data: bool = False


def checkpoint(text: str, bases: tuple[Path, ...], flag: str = "--model", instead: str | None = None) -> str:
    """The model ``text`` names, as every process of the run loads it: a local directory as an absolute path
    (relative to the first of ``bases`` that holds it: the rootdir, then the folder the run was started in, where
    ``from_pretrained`` looks), else ``text`` itself (a hub id). Absolute, so a Ray actor started in another folder
    loads the same directory. A text that can only be a local path (``looks_local``) and names none is a usage error
    naming ``flag`` (``instead``: what to type instead)."""
    path = Path(text).expanduser()
    for base in bases:
        local = path if path.is_absolute() else Path(base) / path
        if local.exists():
            return str(local)
    if looks_local(text):
        where = "" if path.is_absolute() else f" (looked in {', '.join(str(b) for b in dict.fromkeys(bases))})"
        raise UsageError(f"{flag}: no directory {text}{where}; a local checkpoint is a directory that exists, a hub "
                         "id is org/name", flag, instead)
    return text


def looks_local(text: str) -> bool:
    """Whether ``text`` can only name a local path, never a hub id (``org/name``): it starts with ``/``, ``.`` or
    ``~``, or has more than one ``/``.

    >>> [looks_local(t) for t in ("HuggingFaceTB/SmolVLM-256M-Instruct", "./ckpt", "/models/a", "runs/a/b", "gpt2")]
    [False, True, True, True, False]
    """
    return text.startswith(("/", ".", "~")) or text.count("/") > 1


def embedded_parts(values: Mapping[str, object], root: Path) -> frozenset[str]:
    """Which of ``values``' model, data and captions are the embedded default's under ``root``
    (``embedded.is_embedded``: the same path once resolved; a model in memory or behind a server is not)."""
    return frozenset(name for name in EMBEDDED_PARTS if is_embedded(name, values.get(name), root))


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
    if not {"model", "data"} <= embedded_parts({"model": model, "data": data}, root):
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


def inside(path: Path, data: Path) -> bool:
    """Whether ``path`` is the folder of rows ``data`` or lies under it (where every file is read as rows)."""
    if not data.is_dir():
        return False
    try:
        path.resolve().relative_to(data.resolve())
    except ValueError:
        return False
    return True


def resolve(values: Mapping[str, object], *, root: Path, cwd: Path, served: bool,
            typed: Callable[[str], str] = lambda flag: flag) -> Resolution:
    """What ``values`` (an option's typed value by field, its paths joined to the rootdir: ``options.typed_values``)
    name on this machine. ``values["model"]`` is the text given, or None (a model in memory; a served model left to
    its endpoint); ``served``: the weights are behind a server, so ``auto`` applies no overlay to them; ``typed``:
    what to type for an option whose value names nothing here."""
    bases = (root, cwd)
    given = values["model"]
    model = checkpoint(given, bases, "--model", typed("--model")) if given is not None and not served else given
    dual = values["dual_model"]
    if dual not in (None, "auto"):
        dual = checkpoint(dual, bases, "--dual-model", typed("--dual-model"))
    # the weights behind a server or in memory are not known here: auto applies no overlay to them
    limitations, note = resolve_limitations(values["limitations"], None if served else model, values["data"],
                                            root=root)
    journal = values["journal"]
    return Resolution(model=model, dual_model=dual, limitations=limitations, limitations_note=note,
                      embedded=embedded_parts({**values, "model": model}, root),
                      journal_inside_data=journal is not None and inside(journal, values["data"]))
