"""Procedurally drawn fixture rows: coloured shapes on a grid, five question sets, written as JSONL manifests.

Every scene is a function of ``(seed, set name, image index)``; each image carries
up to four questions, so image clusters matter for the bootstrap. The same
generator with another seed makes the training rows of the embedded checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

IMAGE_SIZE = 64
GRID = 4
CELL = IMAGE_SIZE // GRID
BACKGROUND = (235, 235, 235)
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 200, 30)}
SHAPES = ("circle", "square", "triangle")
QUESTIONS_PER_IMAGE = 4

#: The fixture sets, mirroring the reference's mix (yes/no existence, yes/no spatial
#: relation, lettered colour choice, counting choice, choice with a text context).
SET_NAMES = ("exists_yesno", "left_of_yesno", "colour_choice", "count_choice", "context_choice")
VALIDATION_SEED = 0
ROWS_PER_SET = 240


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    col: int
    row: int


def draw_scene(shapes: list[Shape]) -> Image.Image:
    """The shapes drawn on a plain canvas, each inside its grid cell with a 2 px margin."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for s in shapes:
        x0, y0 = s.col * CELL + 2, s.row * CELL + 2
        x1, y1 = x0 + CELL - 5, y0 + CELL - 5
        fill = COLOURS[s.colour]
        if s.kind == "circle":
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif s.kind == "square":
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    return image


def random_scene(rng, n_shapes: int, colours: tuple[str, ...] = tuple(COLOURS)) -> list[Shape]:
    cells = rng.choice(GRID * GRID, size=n_shapes, replace=False)
    return [
        Shape(str(rng.choice(SHAPES)), str(rng.choice(colours)), int(c) % GRID, int(c) // GRID) for c in cells
    ]


def _shuffled_colours(rng) -> list[str]:
    return [str(c) for c in rng.permutation(list(COLOURS))]


def exists_questions(rng, shapes):
    present = sorted({(s.colour, s.kind) for s in shapes})
    absent = [(c, k) for c in COLOURS for k in SHAPES if (c, k) not in present]
    yes = [present[i] for i in rng.permutation(len(present))[: QUESTIONS_PER_IMAGE // 2]]
    no = [absent[i] for i in rng.permutation(len(absent))[: QUESTIONS_PER_IMAGE - len(yes)]]
    asked = [(c, k, 1) for c, k in yes] + [(c, k, 0) for c, k in no]
    return [(f"Is there a {c} {k}?", ["no", "yes"], label, "noul", None) for c, k, label in
            (asked[i] for i in rng.permutation(len(asked)))]


def left_of_questions(rng, shapes):
    by_kind = {}
    for s in shapes:
        by_kind.setdefault(s.kind, []).append(s)
    unique = [v[0] for v in by_kind.values() if len(v) == 1]
    pairs = [(a, b) for a in unique for b in unique if a.kind != b.kind and a.col != b.col]
    chosen = [pairs[i] for i in rng.permutation(len(pairs))[:QUESTIONS_PER_IMAGE]]
    return [(f"Is the {a.kind} left of the {b.kind}?", ["no", "yes"], int(a.col < b.col), "noul", None)
            for a, b in chosen]


def colour_questions(rng, shapes, context: bool = False):
    counts = {k: sum(s.kind == k for s in shapes) for k in SHAPES}
    out = []
    for s in shapes:
        if counts[s.kind] != 1:
            continue
        options = _shuffled_colours(rng)
        if context:
            other = str(rng.choice([c for c in COLOURS if c != s.colour]))
            pair = sorted([s.colour, other])
            ctx = f"Hint: the {s.kind} in this picture is {pair[0]} or {pair[1]}."
            out.append((f"Which colour does the {s.kind} have?", options, options.index(s.colour), "choice", ctx))
        else:
            out.append((f"What colour is the {s.kind}?", options, options.index(s.colour), "choice", None))
    return out[:QUESTIONS_PER_IMAGE]


def count_questions(rng, shapes):
    out = []
    for kind in rng.permutation(list(SHAPES)):
        n = sum(s.kind == kind for s in shapes)
        if n <= 3:
            out.append((f"How many {kind}s are there?", ["0", "1", "2", "3"], n, "choice", None))
    colour = str(rng.choice(list(COLOURS)))
    n = sum(s.colour == colour for s in shapes)
    if n <= 3:
        out.append((f"How many {colour} shapes are there?", ["0", "1", "2", "3"], n, "choice", None))
    return out[:QUESTIONS_PER_IMAGE]


def _scene_for(set_name: str, rng) -> list[Shape]:
    if set_name == "count_choice":
        return random_scene(rng, int(rng.integers(1, 7)))
    if set_name == "left_of_yesno":
        return random_scene(rng, int(rng.integers(2, 5)))
    return random_scene(rng, int(rng.integers(1, 5)))


def _questions_for(set_name: str, rng, shapes):
    if set_name == "exists_yesno":
        return exists_questions(rng, shapes)
    if set_name == "left_of_yesno":
        return left_of_questions(rng, shapes)
    if set_name == "colour_choice":
        return colour_questions(rng, shapes)
    if set_name == "count_choice":
        return count_questions(rng, shapes)
    if set_name == "context_choice":
        return colour_questions(rng, shapes, context=True)
    raise KeyError(f"unknown fixture set {set_name!r} (known: {', '.join(SET_NAMES)})")


def generate_rows(set_name: str, n_rows: int, seed: int) -> list[Row]:
    """``n_rows`` rows of one set; image ``i`` is drawn from ``keyed_rng(seed, set_name, i)``."""
    rows: list[Row] = []
    image_index = 0
    while len(rows) < n_rows:
        rng = keyed_rng(seed, "fixture", set_name, image_index)
        shapes = _scene_for(set_name, rng)
        questions = _questions_for(set_name, rng, shapes)
        if questions:
            image = draw_scene(shapes)
            cluster = f"{set_name}/img{image_index:05d}"
            for question, options, label, primitive, context in questions[: n_rows - len(rows)]:
                row_id = f"{set_name}/{len(rows):06d}"
                rows.append(
                    Row(row_id=row_id, dataset=set_name, group_id=row_id, cluster=cluster, images=(image,),
                        question=question, options=tuple(options), label=label, primitive=primitive,
                        context=context, category=set_name)
                )
        image_index += 1
    return rows


def write_manifest(rows: list[Row], out_dir: Path) -> Path:
    """Write ``rows`` (one dataset) as ``out_dir/<dataset>.jsonl`` with PNGs under ``out_dir/images/<dataset>/``."""
    dataset = rows[0].dataset
    image_dir = out_dir / "images" / dataset
    image_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / f"{dataset}.jsonl"
    written: set[str] = set()
    with manifest.open("w", encoding="utf-8") as fh:
        for row in rows:
            rel = f"images/{dataset}/{row.cluster.split('/')[-1]}.png"
            if rel not in written:
                row.images[0].save(out_dir / rel, format="PNG", optimize=True)
                written.add(rel)
            record = {"row_id": row.row_id, "dataset": row.dataset, "group_id": row.group_id,
                      "cluster": row.cluster, "images": [rel], "question": row.question,
                      "options": list(row.options), "label": row.label, "primitive": row.primitive,
                      "context": row.context, "category": row.category, "meta": dict(row.meta)}
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return manifest


def write_fixture_rows(out_dir: Path, n_rows: int = ROWS_PER_SET, seed: int = VALIDATION_SEED) -> list[Path]:
    """Generate and write every fixture set; returns the manifest paths."""
    return [write_manifest(generate_rows(name, n_rows, seed), out_dir) for name in SET_NAMES]
