"""The registry of perturbation families: each builder is pure, ``(rows, seed) -> variant rows``."""

from __future__ import annotations

import difflib
from typing import Callable, Sequence

from laya_robustness.rows import Row

Builder = Callable[[Sequence[Row], int], list[Row]]

_REGISTRY: dict[str, Builder] = {}

#: The reference's five families, in its order: the flat accuracy / flip table.
CORE_FAMILIES = ("option_order", "text", "image", "image_shuffle", "text_only")
#: The extension families: each summarised in its own block of summary.json.
EXTENSION_FAMILIES = ("option_set", "abstain", "form_choice", "negation", "inject_text", "inject_image")
#: What the gate scores by default (``--families``).
DEFAULT_FAMILIES = CORE_FAMILIES + EXTENSION_FAMILIES


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator that adds a builder to the registry under ``name``."""

    def add(builder: Builder) -> Builder:
        if name in _REGISTRY:
            raise ValueError(f"family {name!r} is registered twice")
        _REGISTRY[name] = builder
        return builder

    return add


def _load_builtin() -> None:
    # Importing the modules registers their builders.
    from laya_robustness.families import option_order  # noqa: F401
    from laya_robustness.families import image, image_shuffle, text, text_only  # noqa: F401
    from laya_robustness.families import form, injection, options  # noqa: F401


def family_names() -> tuple[str, ...]:
    """Every registered family name, sorted."""
    _load_builtin()
    return tuple(sorted(_REGISTRY))


def get_builder(name: str) -> Builder:
    """The builder registered as ``name``; an unknown name raises with the closest known names."""
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown family {name!r}{hint} (known: {', '.join(sorted(_REGISTRY))})") from None


def build_variants(name: str, rows: Sequence[Row], seed: int) -> list[Row]:
    """The variant rows of family ``name`` for ``rows`` (the unperturbed rows are family ``orig``)."""
    return get_builder(name)(rows, seed)
