"""The family registry: each perturbation family is declared once, and everything else derives from it.

A :class:`Family` carries its name, its pure builder ``(rows, seed) -> variant rows``, the summary
block it is reported in, the variants it writes and the ``meta`` keys each of them writes, its
headline metrics (the numbers its limits read), the checks that may be set on it, and how the
tables show it. The summary, the thresholds validation, the pytest markers, the terminal table and
the README's family table all read these declarations; adding a family means one module that
declares it (a module of this package, or of another package named by a ``laya_robustness.families``
entry point), its gate test, its limits and its docs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from laya_robustness.metrics.headline import ACC, DELTA, FLIP, Headline
from laya_robustness.metrics.stability_analysis import MODALITIES
from laya_robustness.records import ORIG
from laya_robustness.registry import Registry
from laya_robustness.rows import Row, with_pixels

Builder = Callable[[Sequence[Row], int], list[Row]]
#: The block metrics of one (family, dataset) cell: (its records, the orig record of each group, the
#: bootstrap settings {"seed", "n_boot", "n_boot_ece"}) -> dict.
CellMetrics = Callable[[Sequence[Any], Mapping[Any, Any], Mapping[str, int]], dict]

#: The summary block of the unperturbed rows and the meaning-preserving families: the flat table.
FLAT = "families"
#: The block of the stability study's families (visual, phrasing and language changes).
STABILITY = "stability"
#: The summary blocks a family can be reported in (each has its tables in the terminal and the reports).
BLOCKS = (FLAT, "options", "form", "injection", STABILITY, "lgip")
#: What each kind of family is, for docs and tables.
KINDS = {
    "orig": "the unperturbed rows",
    "invariance": "meaning-preserving: the answer should not change",
    "control": "a control: accuracy should fall (the model uses the image)",
    "options": "the option set changes",
    "form": "the question form changes",
    "adversarial": "an attack pulls toward a wrong answer",
    "probe": "a caption probe of a dual encoder",
}
#: Where a family's source rows come from: the question rows (``--data``) or the caption rows (``--captions``).
SOURCES = ("rows", "captions")


@dataclass(frozen=True)
class Family:
    """One perturbation family, declared once (see the module doc).

    ``source`` says which rows it is built from (SOURCES). ``variants`` lists the variant names in table order; a name ending in ``*`` is a prefix
    (``as_noul_*``). ``modality`` says what a meaning-preserving family changes (one of MODALITIES:
    the image, the phrasing or the language of the question), or None. ``meta_keys`` maps a variant name (or pattern) to the ``meta`` keys every
    row of that variant writes; ``"*"`` applies to all of them. ``table`` is the statistics the
    flat table shows (flat families only); ``title`` / ``short`` are its column headers. A flat family's
    ``cell``, when it has one, adds its own numbers to the flat cell. ``row_wise`` says that a row's
    variants depend on that row and the seed alone, in row order (``build(rows) == [v for r in rows for v
    in build([r])]``; tests/families/test_row_wise.py checks it): such a family is built in parallel chunks, and a
    report rebuilds only the rows it shows. ``reads_pixels`` says that the builder reads the pixels of its
    rows' images; one that only keeps, drops or moves images between rows declares False and is built on rows
    whose images wait undecoded (``rows.PendingImage``; tests/families/test_reads_pixels.py checks it). ``reads_row_set`` says
    that the builder draws from other rows of the dataset (a donor's images, a borrowed option) and is called
    ``build(rows, seed, row_set)`` with the dataset's whole row set (``families.row_set.RowSet``; None: ``rows`` are
    their own), so that a sampled row's variants are those of the run of every row (tests/families/test_row_set.py checks
    every family). ``slow`` marks
    its gate test ``slow`` (it runs only when ``-m`` names slow); ``default`` says whether ``--families``
    selects it when not given. ``when_empty`` is what the gate says when the family builds no variant of a set
    (why, and how to give it something to build).
    """

    name: str
    build: Builder
    summary: str
    kind: str = "invariance"
    block: str = FLAT
    variants: tuple[str, ...] = ()
    meta_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    headline: tuple[Headline, ...] = (ACC, DELTA, FLIP)
    checks: tuple[str, ...] = ("max_flip", "max_drop")
    cell: CellMetrics | None = None
    title: str = ""
    short: str = ""
    table: tuple[str, ...] = ("acc", "delta", "flip")
    variant_labels: Mapping[str, str] = field(default_factory=dict)
    default: bool = True
    modality: str | None = None
    source: str = "rows"
    row_wise: bool = False
    reads_pixels: bool = True
    reads_row_set: bool = False
    slow: bool = False
    when_empty: str = "none of its rules applies"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"family {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.source not in SOURCES:
            raise ValueError(f"family {self.name!r}: source {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.modality is not None and self.modality not in MODALITIES:
            raise ValueError(f"family {self.name!r}: modality {self.modality!r} is not one of {', '.join(MODALITIES)}")
        if self.block not in BLOCKS:
            raise ValueError(f"family {self.name!r}: block {self.block!r} is not one of {', '.join(BLOCKS)}")
        if self.block != FLAT and self.cell is None:
            raise ValueError(f"family {self.name!r}: a family outside the flat block needs its block metrics (cell)")

    @property
    def headline_keys(self) -> tuple[str, ...]:
        return tuple(h.key for h in self.headline)

    def knows_variant(self, variant: str) -> bool:
        """Whether ``variant`` is one of the declared names (or matches a ``prefix*`` pattern)."""
        return any(variant == v or v.endswith("*") and variant.startswith(v[:-1]) for v in self.variants)

    def meta_keys_of(self, variant: str) -> tuple[str, ...]:
        """The meta keys a row of ``variant`` must carry."""
        keys = list(self.meta_keys.get("*", ()))
        for pattern, names in self.meta_keys.items():
            if pattern != "*" and (variant == pattern or pattern.endswith("*") and variant.startswith(pattern[:-1])):
                keys += names
        return tuple(keys)

    def check_variant(self, row: Row) -> None:
        """Raise ValueError when a built row breaks the declaration (unknown variant, missing meta key)."""
        if row.family != self.name:
            raise ValueError(f"{self.name}: built a row of family {row.family!r} ({row.row_id})")
        if self.variants and not self.knows_variant(row.variant):
            raise ValueError(f"{self.name}: built undeclared variant {row.variant!r} ({row.row_id}); "
                             f"declared: {', '.join(self.variants)}")
        missing = [k for k in self.meta_keys_of(row.variant) if k not in row.meta]
        if missing:
            raise ValueError(f"{self.name}: {row.row_id} lacks declared meta key(s) {', '.join(missing)}")


#: Every declared family (``registry.Registry``): declared by the built-in modules, then by those the
#: ``laya_robustness.families`` entry points of installed packages name.
FAMILIES: Registry[Family] = Registry("family", added="declared")
_REGISTRY = FAMILIES.by_name
#: The built-in family modules in the order of the reference's tables; any other module of this package
#: is imported after them (alphabetically), then the modules named by the ``laya_robustness.families``
#: entry points of installed packages. Each declares its families on import.
_MODULES = ("orig", "option_order", "text", "image", "image_shuffle", "text_only", "option_set", "form", "injection",
            "shift", "pad_crop", "scale", "rotation", "overlay", "rephrase", "language")
ENTRY_POINT_GROUP = "laya_robustness.families"
_loaded = False


def declare(family: Family) -> Family:
    """Add a declaration to the registry (a family module calls this once at import)."""
    FAMILIES.add(family.name, family, origin=getattr(family.build, "__module__", None))
    return family


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    others = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _MODULES)
    for module in (*_MODULES, *others):
        importlib.import_module(f"{__name__}.{module}")
    FAMILIES.load_entry_points(ENTRY_POINT_GROUP)


def declared() -> tuple[Family, ...]:
    """Every declared family in declaration order (orig first)."""
    _load_builtin()
    return tuple(family for _, family in FAMILIES.entries())


def family_names() -> tuple[str, ...]:
    """Every family name except orig, sorted."""
    return tuple(sorted(f.name for f in declared() if f.name != ORIG))


def default_families() -> tuple[str, ...]:
    """What the gate scores by default (``--families``), in declaration order."""
    return tuple(f.name for f in declared() if f.name != ORIG and f.default)


def families_in(block: str) -> tuple[Family, ...]:
    """The declared families summarised in ``block``, in declaration order."""
    return tuple(f for f in declared() if f.block == block)


def blocks() -> tuple[str, ...]:
    """Every summary block, the flat one first."""
    out: list[str] = []
    for f in declared():
        if f.block not in out:
            out.append(f.block)
    return tuple(out)


def modalities() -> dict[str, str | None]:
    """family -> the modality it is declared with (one of MODALITIES, or None), for every declared family: what
    the stability analyses count as visual, phrasing and language."""
    return {f.name: f.modality for f in declared()}


def any_families() -> tuple[str, ...]:
    """The families the stability block's "Any" row pools: its default visual families."""
    return tuple(f.name for f in declared() if f.block == STABILITY and f.modality == "visual" and f.default)


def compares_flips(name: str) -> bool:
    """Whether a comparison with a baseline holds the family's flip-rate change: a declared meaning-preserving
    family (kind ``invariance``)."""
    decl = find_family(name)
    return decl is not None and decl.kind == "invariance"


def get_family(name: str) -> Family:
    """The declaration of ``name``; an unknown name raises KeyError with the closest known names
    (``registry.UnknownName``), one whose entry point does not load ``registry.BrokenEntry`` naming it."""
    _load_builtin()
    return FAMILIES.get(name)


def find_family(name: str) -> Family | None:
    """The declaration of ``name``, or None for a family no module declares (records may name one)."""
    _load_builtin()
    return FAMILIES.find(name)


#: Rows per chunk of a row-wise family's build, and the threads that build the chunks (image work in
#: Pillow and numpy releases the GIL, so the chunks of an image family run side by side).
BUILD_CHUNK_ROWS = 32
BUILD_THREADS = min(4, os.cpu_count() or 1)
_POOL: list = []


def _build_pool():
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(BUILD_THREADS, thread_name_prefix="laya-build"))
    return _POOL[0]


def build_variants(name: str, rows: Sequence[Row], seed: int, row_set=None) -> list[Row]:
    """The rows family ``name`` scores for ``rows``, each checked against the declaration; a row-wise
    family is built in chunks of rows on a thread pool, concatenated in row order (the same rows). A family
    that reads pixels gets its rows with their pixels (``rows.with_pixels``, chunk by chunk). A family that reads
    the row set is given ``row_set`` (``families.row_set.RowSet``), else the one ``rows`` carry (a run's sampled rows,
    ``families.row_set.SampledRows``), else None."""
    family = get_family(name)
    row_set = row_set if row_set is not None else getattr(rows, "row_set", None)

    def build(chunk: Sequence[Row]) -> list[Row]:
        given = [with_pixels(r) for r in chunk] if family.reads_pixels else chunk
        return family.build(given, seed, row_set) if family.reads_row_set else family.build(given, seed)

    if family.row_wise and BUILD_THREADS > 1 and len(rows) > BUILD_CHUNK_ROWS:
        chunks = [rows[i:i + BUILD_CHUNK_ROWS] for i in range(0, len(rows), BUILD_CHUNK_ROWS)]
        out = [v for built in _build_pool().map(build, chunks) for v in built]
    else:
        out = build(rows)
    for row in out:
        family.check_variant(row)
    return out
