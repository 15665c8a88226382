"""Caption rows: the COCO-captions and JSONL loaders.

A caption is a ``Row`` with ``primitive="score"``, ``question=""``, ``options=(caption,)``,
``label=-1`` (a caption is scored on its own: no option is "the right one", so it has no
accuracy), one image, ``group_id=row_id`` and ``cluster`` naming the image, so every caption of
one image is resampled together by the bootstrap. A row may keep the scene facts of its image in
``meta["objects"]`` (``laya_robustness.scenes``), against which a caption can be checked
(``laya_robustness.families.lgip.grammar.caption_holds``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from PIL import Image

from laya_robustness.loaders.image_refs import Where
from laya_robustness.loaders.validate import bounded
from laya_robustness.rows import Row, RowError

PRIMITIVE = "score"


def caption_row(row_id: str, dataset: str, cluster: str, image: Image.Image, caption: str,
                meta: Mapping[str, Any] | None = None) -> Row:
    """A caption Row (primitive ``score``, the caption as its only option, label -1: no accuracy)."""
    return Row(row_id=row_id, dataset=dataset, group_id=row_id, cluster=cluster, images=(image,), question="",
               options=(caption,), label=-1, primitive=PRIMITIVE, meta=dict(meta or {}))



class _ImageCache:
    """Opens each image file once, so every caption of an image shares one PIL image."""

    def __init__(self):
        self._images: dict[Path, Image.Image] = {}

    def get(self, image_path: Path, path, line, field_name: str) -> Image.Image:
        key = image_path.resolve()
        if key not in self._images:
            try:
                with Image.open(image_path) as im:
                    self._images[key] = im.convert("RGB")
            except (OSError, ValueError) as exc:
                raise RowError(path, line, field_name, f"cannot read image {image_path}: {exc}") from exc
        return self._images[key]


def _text(value: Any, path, line, field_name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RowError(path, line, field_name, f"expected a non-empty string, got {repr(value)[:80]}")
    return bounded(value, Where(Path(path), line), field_name).strip()


def load_coco_captions(path: str | Path, images_dir: str | Path | None = None, dataset: str | None = None) -> list[Row]:
    """Caption rows of a COCO-captions file (``images``: ``id``/``file_name``; ``annotations``:
    ``image_id``/``caption``, optional ``id``). Image files lie under ``images_dir`` or beside the file.

    Row ids are ``<dataset>/<annotation id>``, clusters ``<dataset>/<image id>``; errors name the
    entry as ``images[i]`` / ``annotations[i]``.
    """
    path = Path(path)
    dataset = dataset or path.stem
    base = Path(images_dir) if images_dir is not None else path.parent
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RowError(path, exc.lineno, "<json>", str(exc)) from exc
    if not isinstance(data, dict):
        raise RowError(path, None, "<json>", "expected an object with 'images' and 'annotations'")
    for key in ("images", "annotations"):
        if not isinstance(data.get(key), list):
            raise RowError(path, None, key, "missing or not a list")
    files: dict[Any, tuple[str, int]] = {}
    for i, entry in enumerate(data["images"]):
        where = f"images[{i}]"
        if not isinstance(entry, dict) or "id" not in entry:
            raise RowError(path, None, f"{where}.id", "missing")
        files[entry["id"]] = (_text(entry.get("file_name"), path, None, f"{where}.file_name"), i)
    cache, rows = _ImageCache(), []
    for i, ann in enumerate(data["annotations"]):
        where = f"annotations[{i}]"
        if not isinstance(ann, dict):
            raise RowError(path, None, where, "expected an object")
        if ann.get("image_id") not in files:
            raise RowError(path, None, f"{where}.image_id", f"{ann.get('image_id')!r} is not an id in 'images'")
        caption = _text(ann.get("caption"), path, None, f"{where}.caption")
        file_name, image_index = files[ann["image_id"]]
        image = cache.get(base / file_name, path, None, f"images[{image_index}].file_name")
        row_id = f"{dataset}/{ann.get('id', i)}"
        rows.append(caption_row(row_id, dataset, f"{dataset}/{ann['image_id']}", image, caption,
                                {"image_id": ann["image_id"]}))
    _check_unique(rows, path)
    return rows


def load_caption_jsonl(path: str | Path, images_dir: str | Path | None = None, dataset: str | None = None) -> list[Row]:
    """Caption rows of a JSONL file: per line ``{"image": path, "captions": [...]}`` or
    ``{"image": path, "caption": "..."}``, optionally ``image_id``, ``row_id`` (single caption) and
    ``meta`` (an object). Image paths are relative to ``images_dir`` or to the file.

    Row ids default to ``<dataset>/<line>`` (``<dataset>/<line>-<k>`` for a list), the image id
    to the image path.
    """
    path = Path(path)
    dataset = dataset or path.stem
    base = Path(images_dir) if images_dir is not None else path.parent
    from laya_robustness.loaders.jsonl import json_objects

    cache, rows = _ImageCache(), []
    for line, record in json_objects(path):
        rows += _jsonl_rows(record, path, line, base, dataset, cache)
    _check_unique(rows, path)
    return rows


def _jsonl_rows(record: dict, path, line: int, base: Path, dataset: str, cache: _ImageCache) -> list[Row]:
    image_rel = _text(record.get("image"), path, line, "image")
    image = cache.get(base / image_rel, path, line, "image")
    image_id = record.get("image_id", image_rel)
    if not isinstance(image_id, (str, int)) or isinstance(image_id, bool):
        raise RowError(path, line, "image_id", f"expected a string or int, got {image_id!r}")
    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        raise RowError(path, line, "meta", "expected an object")
    if ("caption" in record) == ("captions" in record):
        raise RowError(path, line, "caption", "give exactly one of 'caption' and 'captions'")
    if "caption" in record:
        row_id = record.get("row_id", f"{dataset}/{line:06d}")
        captions = [(_text(row_id, path, line, "row_id"), _text(record["caption"], path, line, "caption"))]
    else:
        if "row_id" in record:
            raise RowError(path, line, "row_id", "a 'captions' list takes no row_id (ids are <dataset>/<line>-<k>)")
        values = record["captions"]
        if not isinstance(values, list) or not values:
            raise RowError(path, line, "captions", "expected a non-empty list of strings")
        captions = [(f"{dataset}/{line:06d}-{k}", _text(c, path, line, f"captions[{k}]")) for k, c in enumerate(values)]
    cluster = f"{dataset}/{image_id}"
    return [caption_row(rid, dataset, cluster, image, c, {**meta, "image_id": image_id}) for rid, c in captions]


def _check_unique(rows: Sequence[Row], path) -> None:
    seen: set[str] = set()
    for row in rows:
        if row.row_id in seen:
            raise RowError(path, None, "row_id", f"{row.row_id!r} appears twice")
        seen.add(row.row_id)


def load_captions(path: str | Path, images_dir: str | Path | None = None) -> dict[str, list[Row]]:
    """Caption rows by dataset from a COCO ``.json`` file, a ``.jsonl`` file, or a directory of them.

    The dataset is the file's stem. Image files are relative to ``images_dir`` when given,
    else to the file. Bad input raises ``RowError`` naming the file, line/entry and field.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"no captions at {path}")
    out: dict[str, list[Row]] = {}
    for file in files:
        loader = load_coco_captions if file.suffix == ".json" else load_caption_jsonl
        for row in loader(file, images_dir):
            out.setdefault(row.dataset, []).append(row)
    if not out:
        raise FileNotFoundError(f"no .json or .jsonl captions under {path}")
    return out
