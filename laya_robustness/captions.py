"""Caption rows: the COCO-captions and JSONL loaders, and the fixture captions drawn from scene facts.

A caption is a ``Row`` with ``primitive="score"``, ``question=""``, ``options=(caption,)``,
``label=-1`` (a caption is scored on its own: no option is "the right one", so it has no
accuracy), one image, ``group_id=row_id`` and ``cluster`` naming the image, so every caption of
one image is resampled together by the bootstrap.

Fixture captions describe coloured shapes on the fixture grid (``fixture_rows``) in a
small grammar that :func:`parse_caption` reads back, and each row keeps the scene facts
in ``meta["objects"]`` (one ``{"shape", "colour", "col", "row"}`` per shape), so a
caption can be checked against its image (:func:`caption_holds`). A mention
("two green triangles", "a red circle", "three circles", "two red shapes") claims an
exact count of the shapes that match its colour and shape word; a relation caption
("a yellow square above a red circle") also claims the relation between the two
(single) shapes it names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from PIL import Image

from laya_robustness.fixture_rows import COLOURS, GRID, SHAPES, Shape, draw_scene
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row, RowError

PRIMITIVE = "score"
CAPTION_SET = "shape_captions"
VALIDATION_SEED = 0
N_IMAGES = 100
CAPTIONS_PER_IMAGE = 4
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
#: The relation phrases of the fixture grammar and the converse of each.
RELATIONS = {"above": "below", "below": "above", "to the left of": "to the right of",
             "to the right of": "to the left of"}
TEMPLATES = ("list", "group", "shape_count", "colour_count", "relation", "shows", "there")

_DET = r"(?P<det>a|an|" + "|".join(NUMBER_WORDS[1:]) + r")"
_COLOUR = r"(?:(?P<colour>" + "|".join(COLOURS) + r")\s+)?"
_NOUN = r"(?P<noun>(?:" + "|".join(SHAPES) + r"|shape)s?)"
MENTION_PATTERN = re.compile(rf"\b{_DET}\s+{_COLOUR}{_NOUN}\b", re.IGNORECASE)


# -- the fixture grammar: mentions, relations, truth against the scene --------------------------


@dataclass(frozen=True)
class Mention:
    """A noun phrase of a caption: it claims ``count`` shapes match ``colour`` and ``shape``.

    ``colour`` / ``shape`` None match any colour / shape. The spans locate the
    determiner, the colour word and the noun in the caption text.
    """

    count: int
    colour: str | None
    shape: str | None
    det_span: tuple[int, int]
    colour_span: tuple[int, int] | None
    noun_span: tuple[int, int]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.colour is None or obj["colour"] == self.colour) and (self.shape is None or obj["shape"] == self.shape)


def count_of(det: str) -> int:
    """The count a determiner claims: "a"/"an" is one, a number word its number."""
    det = det.lower()
    return 1 if det in ("a", "an") else NUMBER_WORDS.index(det)


def noun_for(shape: str | None, count: int) -> str:
    """The noun of a mention: the shape word (or "shape"), plural unless the count is one."""
    word = shape or "shape"
    return word if count == 1 else word + "s"


def determiner_for(count: int, next_word: str) -> str:
    """"a"/"an" for one (by the next word's first letter), the number word otherwise."""
    if count == 1:
        return "an" if next_word[:1].lower() in "aeiou" else "a"
    return NUMBER_WORDS[count]


def noun_phrase(count: int, colour: str | None, shape: str | None) -> str:
    """"a red circle", "two green triangles", "three circles", "two red shapes"."""
    rest = " ".join(w for w in (colour, noun_for(shape, count)) if w)
    return f"{determiner_for(count, rest)} {rest}"


def parse_mentions(text: str) -> list[Mention]:
    """Every noun phrase of the fixture grammar in ``text``, left to right."""
    out = []
    for m in MENTION_PATTERN.finditer(text):
        noun = m.group("noun").lower().rstrip("s")
        colour = m.group("colour")
        out.append(Mention(count_of(m.group("det")), colour.lower() if colour else None,
                           None if noun == "shape" else noun, m.span("det"),
                           m.span("colour") if colour else None, m.span("noun")))
    return out


def parse_relation(text: str, mentions: Sequence[Mention]) -> str | None:
    """The relation phrase between the first two mentions ("above", "to the left of", ...), if any."""
    if len(mentions) < 2:
        return None
    between = text[mentions[0].noun_span[1]:mentions[1].det_span[0]].strip().lower()
    return between if between in RELATIONS else None


def relation_holds(relation: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether shape ``a`` stands in ``relation`` to shape ``b`` on the grid (rows grow downwards)."""
    if relation == "above":
        return a["row"] < b["row"]
    if relation == "below":
        return a["row"] > b["row"]
    if relation == "to the left of":
        return a["col"] < b["col"]
    if relation == "to the right of":
        return a["col"] > b["col"]
    raise KeyError(f"unknown relation {relation!r} (known: {', '.join(RELATIONS)})")


def caption_holds(text: str, objects: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a fixture-grammar caption is true of the scene ``objects``.

    True iff the caption names at least one mention, every mention's count equals the
    number of objects it matches, and a relation between the first two mentions holds
    between the objects they match (each must then match exactly one).

    >>> scene = [{"shape": "circle", "colour": "red", "col": 0, "row": 0},
    ...          {"shape": "square", "colour": "blue", "col": 2, "row": 3}]
    >>> caption_holds("a red circle above a blue square", scene), caption_holds("two red circles", scene)
    (True, False)
    """
    mentions = parse_mentions(text)
    if not mentions:
        return False
    matched = [[o for o in objects if m.matches(o)] for m in mentions]
    if any(len(objs) != m.count for m, objs in zip(mentions, matched)):
        return False
    relation = parse_relation(text, mentions)
    if relation is None:
        return True
    a, b = matched[0], matched[1]
    return len(a) == 1 and len(b) == 1 and relation_holds(relation, a[0], b[0])


# -- fixture captions -------------------------------------------------------------------------


def caption_scene(rng) -> list[Shape]:
    """1-3 groups of 1-3 shapes, each group one distinct (colour, shape), placed in distinct cells."""
    n_groups = int(rng.integers(1, 4))
    kinds = [(c, s) for c in COLOURS for s in SHAPES]
    picked = [kinds[i] for i in rng.choice(len(kinds), size=n_groups, replace=False)]
    counts = [int(rng.choice([1, 1, 2, 3])) for _ in picked]
    cells = rng.choice(GRID * GRID, size=sum(counts), replace=False)
    shapes, k = [], 0
    for (colour, shape), n in zip(picked, counts):
        for _ in range(n):
            shapes.append(Shape(shape, colour, int(cells[k]) % GRID, int(cells[k]) // GRID))
            k += 1
    return shapes


def scene_objects(shapes: Iterable[Shape]) -> list[dict]:
    """The scene facts a caption row keeps in ``meta["objects"]``."""
    return [{"shape": s.kind, "colour": s.colour, "col": s.col, "row": s.row} for s in shapes]


def _groups(shapes: Sequence[Shape]) -> list[tuple[str, str, int]]:
    counts: dict[tuple[str, str], int] = {}
    for s in shapes:
        counts[(s.colour, s.kind)] = counts.get((s.colour, s.kind), 0) + 1
    return [(c, k, n) for (c, k), n in sorted(counts.items())]


def _join(phrases: Sequence[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _template_caption(template: str, rng, shapes: Sequence[Shape]) -> str | None:
    groups = _groups(shapes)
    order = [groups[i] for i in rng.permutation(len(groups))]
    listed = [noun_phrase(n, c, k) for c, k, n in order]
    if template == "list":
        return _join(listed)
    if template == "shows":
        return "the picture shows " + _join(listed)
    if template == "there":
        return ("there is " if order[0][2] == 1 else "there are ") + _join(listed)
    if template == "group":
        return listed[0] if len(groups) > 1 else None
    if template == "shape_count":
        kind = str(rng.choice(sorted({s.kind for s in shapes})))
        return noun_phrase(sum(s.kind == kind for s in shapes), None, kind)
    if template == "colour_count":
        colour = str(rng.choice(sorted({s.colour for s in shapes})))
        return noun_phrase(sum(s.colour == colour for s in shapes), colour, None)
    if template == "relation":
        single = [next(s for s in shapes if (s.colour, s.kind) == (c, k)) for c, k, n in groups if n == 1]
        options = [(a, rel, b) for a in single for b in single if a is not b for rel in RELATIONS
                   if relation_holds(rel, {"row": a.row, "col": a.col}, {"row": b.row, "col": b.col})]
        if not options:
            return None
        a, rel, b = options[int(rng.integers(len(options)))]
        return f"{noun_phrase(1, a.colour, a.kind)} {rel} {noun_phrase(1, b.colour, b.kind)}"
    raise KeyError(f"unknown caption template {template!r} (known: {', '.join(TEMPLATES)})")


def scene_captions(rng, shapes: Sequence[Shape], n: int = CAPTIONS_PER_IMAGE) -> list[tuple[str, str]]:
    """Up to ``n`` distinct (template, caption) pairs for the scene: ``relation`` first (it applies
    to few scenes), then the other templates in a seeded order."""
    out: list[tuple[str, str]] = []
    others = [t for t in TEMPLATES if t != "relation"]
    for template in ["relation"] + [others[i] for i in rng.permutation(len(others))]:
        text = _template_caption(template, rng, shapes)
        if text is not None and text not in {t for _, t in out}:
            out.append((template, text))
        if len(out) == n:
            break
    return out


def generate_captions(n_images: int, seed: int, dataset: str = CAPTION_SET,
                      captions_per_image: int = CAPTIONS_PER_IMAGE) -> list[Row]:
    """Caption rows for ``n_images`` scenes; scene ``i`` is drawn from ``keyed_rng(seed, "captions", dataset, i)``.

    Every caption is checked against its scene with :func:`caption_holds`.
    """
    rows: list[Row] = []
    for i in range(n_images):
        rng = keyed_rng(seed, "captions", dataset, i)
        shapes = caption_scene(rng)
        image, objects = draw_scene(shapes), scene_objects(shapes)
        cluster = f"{dataset}/img{i:05d}"
        for k, (template, text) in enumerate(scene_captions(rng, shapes, captions_per_image)):
            if not caption_holds(text, objects):
                raise AssertionError(f"caption {text!r} ({template}) does not hold in scene {objects}")
            row_id = f"{cluster}/c{k}"
            rows.append(caption_row(row_id, dataset, cluster, image, text,
                                    {"objects": objects, "template": template}))
    return rows


def caption_row(row_id: str, dataset: str, cluster: str, image: Image.Image, caption: str,
                meta: Mapping[str, Any] | None = None) -> Row:
    """A caption Row (primitive ``score``, the caption as its only option, label -1: no accuracy)."""
    return Row(row_id=row_id, dataset=dataset, group_id=row_id, cluster=cluster, images=(image,), question="",
               options=(caption,), label=-1, primitive=PRIMITIVE, meta=dict(meta or {}))


def write_captions(rows: Sequence[Row], out_dir: Path) -> Path:
    """Write ``rows`` (one dataset) as ``out_dir/<dataset>.jsonl`` (one caption per line) with PNGs
    under ``out_dir/images/<dataset>/``."""
    out_dir = Path(out_dir)
    dataset = rows[0].dataset
    image_dir = out_dir / "images" / dataset
    image_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / f"{dataset}.jsonl"
    written: set[str] = set()
    with manifest.open("w", encoding="utf-8") as fh:
        for row in rows:
            image_id = row.cluster.split("/")[-1]
            rel = f"images/{dataset}/{image_id}.png"
            if rel not in written:
                row.images[0].save(out_dir / rel, format="PNG", optimize=True)
                written.add(rel)
            record = {"row_id": row.row_id, "image_id": image_id, "image": rel, "caption": row.options[0],
                      "meta": dict(row.meta)}
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return manifest


def write_fixture_captions(out_dir: Path, n_images: int = N_IMAGES, seed: int = VALIDATION_SEED) -> Path:
    """Generate and write the fixture caption set; returns the JSONL path."""
    return write_captions(generate_captions(n_images, seed), out_dir)


# -- loaders ----------------------------------------------------------------------------------


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
        raise RowError(path, line, field_name, f"expected a non-empty string, got {value!r}")
    return value.strip()


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
