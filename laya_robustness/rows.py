"""The Row type, the fields a row is read from, the error every loader raises for a bad row, an image's
content key, and an image that waits to be decoded (``PendingImage``).

The loaders themselves (JSONL manifests, VLMEvalKit TSV, parquet and ``datasets`` directories)
live in :mod:`laya_robustness.loaders`.

>>> from PIL import Image
>>> a, b = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "red")
>>> image_digest(a) == image_digest(b)          # same pixels, size and mode: same key
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import string
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from PIL import Image

#: ``choice``: k options, one gold index; ``noul``: the options are no/yes; ``open``: no options,
#: a tuple of accepted ``answers`` and ``label == -1`` (the caller judges a generated answer).
PRIMITIVES = ("choice", "noul", "open")
LETTERS = string.ascii_uppercase
#: The fields of a row as a manifest record (JSONL object, parquet column) names them.
RECORD_FIELDS = ("row_id", "dataset", "group_id", "cluster", "images", "question", "options", "label",
                 "primitive", "answers", "context", "category", "meta")
#: The label of an open row: it has no option index.
OPEN_LABEL = -1
#: The row meta keys the user's variant files fill (``loaders.variant_files`` reads the files; the families read the keys).
REPHRASINGS, TRANSLATIONS, PARAPHRASES = "rephrasings", "translations", "paraphrases"
#: The row meta key that says whether a row's question is rotation-variant (the rotation families read it).
ROTATION_VARIANT = "rotation_variant"
#: A language code: lower-case ISO 639, optionally with subtags ("fr", "pt-BR").
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})*")


def user_meta_problem(key: str, value: Any) -> tuple[str, str] | None:
    """(field under ``meta``, problem) when ``value`` is not what the meta key ``key`` a family reads may hold, None
    when it is (or when no family reads ``key``): ``rephrasings`` a list of strings, ``translations`` an object
    language code -> string, ``rotation_variant`` true or false. The loaders refuse such a row when they read it;
    a family refuses it when it builds from it.

    >>> user_meta_problem("rotation_variant", "yes")
    ('rotation_variant', "expected true or false, got 'yes'")
    >>> user_meta_problem("translations", {"fr": 3})
    ('translations.fr', 'expected a string, got 3')
    """
    if key == ROTATION_VARIANT and not isinstance(value, bool):
        return key, f"expected true or false, got {value!r}"
    if key == REPHRASINGS and (not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value)):
        return key, f"expected a list of strings, got {value!r}"
    if key == TRANSLATIONS:
        if not isinstance(value, Mapping):
            return key, f"expected an object language -> text, got {value!r}"
        for language, text in value.items():
            if not isinstance(language, str) or not LANGUAGE_CODE.fullmatch(language):
                return key, f"{language!r} is not a language code (lower-case ISO 639, optionally with a region)"
            if not isinstance(text, str):
                return f"{key}.{language}", f"expected a string, got {text!r}"
    return None


class RowError(ValueError):
    """A row that cannot be read; the message names the file, line (or table row) and field.

    ``unit`` is ``"line"`` for text files (``file:12``) and ``"row"`` for tables, where
    ``line`` is the 0-based row index of the file (``file row 12``). ``fix``: what to write instead, for the
    row's kind (the loaders' report prints it under the message; None: none said).
    """

    def __init__(self, path: str | Path, line: int | None, field_name: str, problem: str, *, unit: str = "line",
                 fix: str | None = None):
        self.path, self.line, self.field_name, self.problem, self.unit = str(path), line, field_name, problem, unit
        self.fix = fix
        super().__init__(f"{location(path, line, unit)}: field '{field_name}': {problem}")


def location(path: str | Path, line: int | None, unit: str = "line") -> str:
    """``file:12`` for a line of a text file, ``file row 12`` for a table row, ``file`` for the whole file."""
    if line is None:
        return str(path)
    return f"{path}:{line}" if unit == "line" else f"{path} row {line}"


@dataclass(frozen=True, eq=False)
class Row:
    """One question about zero or more images, with its options in label order.

    ``display_order`` is the order in which the options are shown to the model
    (``display_order[i]`` is the label-order index of the option shown i-th);
    ``None`` means label order. Scorers always return logits in label order.
    ``group_id`` names the source row a variant was built from; ``cluster`` the
    image the row shares with its sibling questions (resampled together).
    An ``open`` row has no options, ``label == -1`` and its accepted ``answers``.
    """

    row_id: str
    dataset: str
    group_id: str
    cluster: str
    images: tuple[Image.Image, ...]
    question: str
    options: tuple[str, ...]
    label: int
    primitive: str = "choice"
    context: str | None = None
    category: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    family: str = "orig"
    variant: str = "orig"
    display_order: tuple[int, ...] | None = None
    answers: tuple[str, ...] = ()

    @property
    def shown_options(self) -> tuple[str, ...]:
        """The option texts in the order the model sees them."""
        if self.display_order is None:
            return self.options
        return tuple(self.options[i] for i in self.display_order)

    def derive(self, family: str, variant: str, **changes: Any) -> "Row":
        """A variant of this row: same group and cluster, new family/variant and row id."""
        return self.replaced(row_id=f"{self.group_id}|{family}|{variant}", family=family, variant=variant, **changes)

    def replaced(self, **changes: Any) -> "Row":
        """``dataclasses.replace(self, **changes)`` without running ``__init__`` again: the same fields, copied
        (a run copies a row for each variant and each time a chunk is given its pixels; a frozen dataclass's
        ``__init__`` costs about 10 us a copy, this 2 us).

            >>> row = Row("r1", "d", "g", "c", (), "Which?", ("a", "b"), 0)
            >>> row.replaced(label=1).label, row.label
            (1, 0)
        """
        if type(self) is not Row:  # a subclass may check its fields in __post_init__
            return dataclasses.replace(self, **changes)
        unknown = changes.keys() - _ROW_FIELDS
        if unknown:
            raise TypeError(f"Row has no field {', '.join(sorted(unknown))}")
        new = object.__new__(Row)
        new.__dict__.update(self.__dict__, **changes)
        return new


_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(Row))


class PendingImage:
    """An image held as its content key (``digest``), mode and size, not as pixels: ``load()`` gives the pixels
    from its ``source`` (the run's bounded image store, or the image decoded or rebuilt again). A run's rows
    carry these and get their pixels (``with_pixels``) only for the chunk being built or scored;
    ``image_digest`` reads the key without them. A family builder that reads pixels is given rows with their
    pixels (``Family.reads_pixels``)."""

    __slots__ = ("digest", "mode", "size", "source")

    def __init__(self, digest: str, mode: str, size: tuple[int, int], source: Callable[[str], Image.Image]):
        self.digest, self.mode, self.size, self.source = digest, mode, tuple(size), source

    def load(self) -> Image.Image:
        """The pixels, from ``source(digest)`` (their digest memoised, so ``image_digest`` of them costs nothing)."""
        image = self.source(self.digest)
        remember_digest(image, self.digest)
        return image

    def __reduce__(self):
        """Pickled (sent to a Ray actor) as it is where its source can travel (a ``portable`` source makes its
        pixels again where it lands: ``run.pipeline.image_store``), else as its pixels."""
        if getattr(self.source, "portable", False):
            return PendingImage, (self.digest, self.mode, self.size, self.source)
        return _as_is, (self.load(),)

    def __getattr__(self, name: str):
        raise AttributeError(f"{name!r}: a PendingImage ({self.mode} {self.size[0]}x{self.size[1]}) holds no "
                             "pixels; give the row its pixels first (rows.with_pixels), or declare the family "
                             "reads_pixels=True")

    def __repr__(self) -> str:
        return f"PendingImage({self.digest[:12]}, {self.mode}, {self.size[0]}x{self.size[1]})"


def _as_is(image: Image.Image) -> Image.Image:
    return image


def with_pixels(row: Row) -> Row:
    """``row`` with every PendingImage loaded (``row`` itself when none waits)."""
    if not any(isinstance(im, PendingImage) for im in row.images):
        return row
    return row.replaced(images=tuple(im.load() if isinstance(im, PendingImage) else im for im in row.images))


_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}


def remember_digest(image: Image.Image, digest: str) -> None:
    """Memoise ``digest`` as the content key of the live object ``image`` (one known from its pixels)."""
    key = id(image)
    known = _DIGESTS.get(key)
    if known is not None and known[0]() is image:
        return
    try:
        _DIGESTS[key] = (weakref.ref(image, lambda _, key=key: _DIGESTS.pop(key, None)), digest)
    except TypeError:  # an object without weak references: no memo
        pass


def image_digest(image: Image.Image | PendingImage) -> str:
    """sha256 over the image's mode, size and raw pixel bytes: its content key (the scorer's caches, the journal
    and the data fingerprint all use it), memoised per live image object; a PendingImage's own key."""
    if isinstance(image, PendingImage):
        return image.digest
    known = _DIGESTS.get(id(image))
    if known is not None and known[0]() is image:
        return known[1]
    h = hashlib.sha256(f"{image.mode}:{image.size}".encode())
    h.update(image.tobytes())
    digest = h.hexdigest()
    remember_digest(image, digest)
    return digest
