"""The Row type, the fields a row is read from, and the error every loader raises for a bad row.

The loaders themselves (JSONL manifests, VLMEvalKit TSV, parquet and ``datasets`` directories)
live in :mod:`laya_robustness.loaders`; ``load_rows`` and ``row_from_record`` here are their
entry points.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from PIL import Image

if TYPE_CHECKING:
    from laya_robustness.loaders.settings import LoadSettings

#: ``choice``: k options, one gold index; ``noul``: the options are no/yes; ``open``: no options,
#: a tuple of accepted ``answers`` and ``label == -1`` (the caller judges a generated answer).
PRIMITIVES = ("choice", "noul", "open")
LETTERS = string.ascii_uppercase
#: The fields of a row as a manifest record (JSONL object, parquet column) names them.
RECORD_FIELDS = ("row_id", "dataset", "group_id", "cluster", "images", "question", "options", "label",
                 "primitive", "answers", "context", "category", "meta")
#: The label of an open row: it has no option index.
OPEN_LABEL = -1


class RowError(ValueError):
    """A row that cannot be read; the message names the file, line (or table row) and field.

    ``unit`` is ``"line"`` for text files (``file:12``) and ``"row"`` for tables, where
    ``line`` is the 0-based row index of the file (``file row 12``).
    """

    def __init__(self, path: str | Path, line: int | None, field_name: str, problem: str, *, unit: str = "line"):
        self.path, self.line, self.field_name, self.problem, self.unit = str(path), line, field_name, problem, unit
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
        return dataclasses.replace(
            self, row_id=f"{self.group_id}|{family}|{variant}", family=family, variant=variant, **changes
        )


def row_from_record(record: Mapping[str, Any], base_dir: Path, path, line: int,
                    settings: "LoadSettings | None" = None, data_root: Path | None = None) -> Row:
    """Validate one manifest record and build its Row (images decoded); image paths are relative to ``base_dir``.

    Image paths must stay inside ``data_root`` (default ``base_dir``) unless the settings allow otherwise.
    """
    from laya_robustness.loaders.records import manifest_row
    from laya_robustness.loaders.settings import LoadSettings

    settings = settings or LoadSettings()
    return manifest_row(record, Path(base_dir), Path(data_root or base_dir), path, line, settings).load()


def load_rows(source: str | Path, settings: "LoadSettings | None" = None) -> dict[str, list[Row]]:
    """Every row by dataset from a JSONL / TSV / parquet file, a ``datasets`` directory, or a directory of them."""
    from laya_robustness.loaders import load_rows as _load_rows

    return _load_rows(source, settings)
