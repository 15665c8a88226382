"""Where the embedded default lives, relative to the project root: its rows, checkpoints, captions and known
limitations (``laya_fixtures/``; how they are made is ``laya_robustness.recipes``); and whether a run's setting is
the embedded default's (``is_embedded``)."""

from __future__ import annotations

from pathlib import Path

EMBEDDED_DATA, EMBEDDED_MODEL = "laya_fixtures/rows", "laya_fixtures/tiny-smolvlm"
EMBEDDED_LIMITATIONS = "laya_fixtures/limitations.toml"
EMBEDDED_CAPTIONS, EMBEDDED_DUAL_MODEL = "laya_fixtures/captions", "laya_fixtures/tiny-clip"
#: The settings ``is_embedded`` knows: a run's option -> where the embedded default's lives.
EMBEDDED = {"model": EMBEDDED_MODEL, "data": EMBEDDED_DATA, "captions": EMBEDDED_CAPTIONS}


def is_embedded(setting: str, value: str | Path | None, root: str | Path | None = None) -> bool:
    """Whether ``value``, a run's ``setting`` (``model``, ``data`` or ``captions``), is the embedded default's under
    ``root`` (default the working directory): the same path once resolved (a relative one against the working
    directory). None or an empty value (a model in memory, nothing given) is not.

    >>> is_embedded("model", "laya_fixtures/tiny-smolvlm"), is_embedded("data", "laya_fixtures/rows", root="/elsewhere")
    (True, False)
    >>> is_embedded("model", None), is_embedded("model", "")
    (False, False)
    """
    if not value:
        return False
    where = Path(root) if root is not None else Path()
    return Path(value).resolve() == (where / EMBEDDED[setting]).resolve()
