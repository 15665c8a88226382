"""The Row type and the loaders that read rows from JSONL manifests and VLMEvalKit-style TSV files."""

from __future__ import annotations

import base64
import csv
import dataclasses
import io
import json
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from PIL import Image

PRIMITIVES = ("choice", "noul")
LETTERS = string.ascii_uppercase


class RowError(ValueError):
    """A row that cannot be read; the message names the file, line and field."""

    def __init__(self, path: str | Path, line: int | None, field_name: str, problem: str):
        self.path, self.line, self.field_name = str(path), line, field_name
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: field '{field_name}': {problem}")


@dataclass(frozen=True, eq=False)
class Row:
    """One question about zero or more images, with its options in label order.

    ``display_order`` is the order in which the options are shown to the model
    (``display_order[i]`` is the label-order index of the option shown i-th);
    ``None`` means label order. Scorers always return logits in label order.
    ``group_id`` names the source row a variant was built from; ``cluster`` the
    image the row shares with its sibling questions (resampled together).
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


def _require(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path, line) -> Any:
    if key not in record:
        raise RowError(path, line, key, "missing")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise RowError(path, line, key, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _open_image(image_path: Path, path, line, field_name: str) -> Image.Image:
    try:
        with Image.open(image_path) as im:
            return im.convert("RGB")
    except (OSError, ValueError) as exc:
        raise RowError(path, line, field_name, f"cannot read image {image_path}: {exc}") from exc


def row_from_record(record: Mapping[str, Any], base_dir: Path, path, line: int) -> Row:
    """Validate one manifest record and build its Row; image paths are relative to ``base_dir``."""
    row_id = _require(record, "row_id", str, path, line)
    dataset = _require(record, "dataset", str, path, line)
    question = _require(record, "question", str, path, line)
    options = _require(record, "options", list, path, line)
    if len(options) < 2 or not all(isinstance(o, str) and o.strip() for o in options):
        raise RowError(path, line, "options", "need at least two non-empty strings")
    label = _require(record, "label", int, path, line)
    if not 0 <= label < len(options):
        raise RowError(path, line, "label", f"{label} is not an index into {len(options)} options")
    primitive = record.get("primitive", "choice")
    if primitive not in PRIMITIVES:
        raise RowError(path, line, "primitive", f"{primitive!r} is not one of {PRIMITIVES}")
    if primitive == "noul" and [o.lower() for o in options] != ["no", "yes"]:
        raise RowError(path, line, "options", "a noul row has the options ['no', 'yes']")
    image_paths = record.get("images", [])
    if not isinstance(image_paths, list) or not all(isinstance(p, str) for p in image_paths):
        raise RowError(path, line, "images", "expected a list of relative paths")
    images = tuple(_open_image(base_dir / p, path, line, f"images[{i}]") for i, p in enumerate(image_paths))
    context = record.get("context")
    if context is not None and not isinstance(context, str):
        raise RowError(path, line, "context", "expected a string or null")
    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        raise RowError(path, line, "meta", "expected an object")
    return Row(
        row_id=row_id,
        dataset=dataset,
        group_id=record.get("group_id", row_id),
        cluster=record.get("cluster", row_id),
        images=images,
        question=question,
        options=tuple(options),
        label=label,
        primitive=primitive,
        context=context or None,
        category=record.get("category"),
        meta=meta,
    )


def load_jsonl(path: str | Path) -> list[Row]:
    """Rows of a JSONL manifest (one JSON object per line, image paths relative to the file)."""
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RowError(path, line_no, "<json>", str(exc)) from exc
            if not isinstance(record, dict):
                raise RowError(path, line_no, "<json>", "expected an object")
            rows.append(row_from_record(record, path.parent, path, line_no))
    return rows


def load_tsv(path: str | Path, dataset: str | None = None) -> list[Row]:
    """Rows of a VLMEvalKit-style TSV: ``index, image`` (base64), ``question, hint, A, B, ..., answer``.

    ``answer`` is an option letter; ``hint`` becomes the text context. Line numbers
    in errors count the header as line 1.
    """
    path = Path(path)
    dataset = dataset or path.stem
    csv.field_size_limit(sys.maxsize)
    rows = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        header = reader.fieldnames or []
        for name in ("index", "image", "question", "A", "B", "answer"):
            if name not in header:
                raise RowError(path, 1, name, "column missing from the header")
        letters = [c for c in LETTERS if c in header]
        for line_no, rec in enumerate(reader, start=2):
            index = (rec.get("index") or "").strip()
            if not index:
                raise RowError(path, line_no, "index", "empty")
            options = [rec[c] for c in letters if rec.get(c) not in (None, "", "nan")]
            answer = (rec.get("answer") or "").strip()
            if answer not in LETTERS[: len(options)]:
                raise RowError(path, line_no, "answer", f"{answer!r} is not one of the {len(options)} option letters")
            try:
                image = Image.open(io.BytesIO(base64.b64decode(rec["image"], validate=True))).convert("RGB")
            except (ValueError, OSError) as exc:
                raise RowError(path, line_no, "image", f"not a base64-encoded image: {exc}") from exc
            hint = rec.get("hint")
            row_id = f"{dataset}/{index}"
            rows.append(
                Row(
                    row_id=row_id,
                    dataset=dataset,
                    group_id=row_id,
                    cluster=row_id,
                    images=(image,),
                    question=rec["question"],
                    options=tuple(options),
                    label=LETTERS.index(answer),
                    context=hint if hint and hint != "nan" else None,
                    category=rec.get("category") or None,
                )
            )
    return rows


def load_rows(source: str | Path) -> dict[str, list[Row]]:
    """Rows by dataset from a manifest file, a TSV file, or a directory of them (sorted by name)."""
    source = Path(source)
    if source.is_dir():
        files: Iterable[Path] = sorted(p for p in source.iterdir() if p.suffix in (".jsonl", ".tsv"))
    elif source.is_file():
        files = [source]
    else:
        raise FileNotFoundError(f"no rows at {source}")
    by_dataset: dict[str, list[Row]] = {}
    for file in files:
        rows = load_tsv(file) if file.suffix == ".tsv" else load_jsonl(file)
        for row in rows:
            by_dataset.setdefault(row.dataset, []).append(row)
    if not by_dataset:
        raise FileNotFoundError(f"no .jsonl or .tsv rows under {source}")
    return by_dataset
