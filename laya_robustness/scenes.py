"""Scene facts: coloured shapes on a grid, the objects a fixture image shows (a caption row keeps them in
``meta["objects"]``), and the drawing of a scene as an image."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageDraw

IMAGE_SIZE = 64
GRID = 4
CELL = IMAGE_SIZE // GRID
BACKGROUND = (235, 235, 235)
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 200, 30)}
SHAPES = ("circle", "square", "triangle")


@dataclass(frozen=True)
class Shape:
    """One shape of a scene: its kind (one of SHAPES), colour (one of COLOURS) and grid cell."""

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
