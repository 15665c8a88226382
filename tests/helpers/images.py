"""Images built for the tests: gradients that differ with ``n``, and encoded files whole or cut short."""

import io

import numpy as np
from PIL import Image


def gradient_image(n: int, size: tuple[int, int]) -> Image.Image:
    """An RGB image of ``size`` whose colour gradients differ with ``n``."""
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * (5 + n)) % 256, (yy * (3 + 2 * n)) % 256, np.full_like(xx, 20 * n)], axis=-1)
    return Image.fromarray(arr.astype(np.uint8), "RGB")


def encoded(fmt: str, size=(64, 64)) -> bytes:
    """A noise image of ``size`` encoded as ``fmt``."""
    image = io.BytesIO()
    Image.effect_noise(size, 50).convert("RGB").save(image, format=fmt)
    return image.getvalue()


def cut(data: bytes) -> bytes:
    """The first half of ``data``: a file cut short in copying."""
    return data[: len(data) // 2]
