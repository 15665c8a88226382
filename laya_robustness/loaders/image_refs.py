"""Where a row's images are (a file or an encoded payload), checked at load, decoded when used.

An :class:`ImageRef` is made for every image a loader reads: the path rules, the payload-size
bound and the pixel limit are checked then, from the file size and the image header, and the
image is checked whole (``cut_short``), so a bad image stops the run before any scoring; the
pixels are decoded only by :meth:`ImageRef.decode`, for the rows that are sampled.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from laya_robustness.loaders.fixes import DAMAGED_IMAGE, LARGE_IMAGE, OUTSIDE_DATA
from laya_robustness.loaders.settings import LoadSettings
from laya_robustness.rows import RowError, location


@dataclass(frozen=True)
class Where:
    """A place in a data file: the file, its line (text) or 0-based row (table), for error messages."""

    path: Path
    line: int | None = None
    unit: str = "line"

    def error(self, field_name: str, problem: str, fix: str | None = None) -> RowError:
        return RowError(self.path, self.line, field_name, problem, unit=self.unit, fix=fix)

    def __str__(self) -> str:
        return location(self.path, self.line, self.unit)


@dataclass(frozen=True, eq=False)
class ImageRef:
    """One image of a row: a file or an encoded payload, where it was named, and the pixel limit it passed."""

    where: Where
    field_name: str
    max_pixels: int
    file: Path | None = None
    payload: bytes | None = None
    max_side: int = 0  # decoded images are scaled down to this longest side (0: kept as they are)

    @property
    def name(self) -> str:
        return str(self.file) if self.file is not None else f"the {len(self.payload or b'')}-byte payload"

    def read(self) -> bytes:
        """The encoded bytes (the file's content, or the payload)."""
        if self.payload is not None:
            return self.payload
        try:
            return self.file.read_bytes()
        except OSError as exc:
            raise self.where.error(self.field_name, f"cannot read image {self.file}: {exc}") from exc

    def decode(self) -> Image.Image:
        """The pixels as an RGB image, scaled down to ``max_side`` (``cap_side``); a decoding failure is a
        RowError naming file, line and field."""
        return cap_side(_open(self, decode=True), self.max_side)


def file_image(where: Where, field_name: str, text: str, base_dir: Path, data_root: Path,
               settings: LoadSettings) -> ImageRef:
    """An image file named by ``text`` relative to ``base_dir``, kept inside ``data_root`` unless allowed."""
    if not text.strip():
        raise where.error(field_name, "empty image path")
    if "\x00" in text:
        raise where.error(field_name, f"image path {text!r} holds a NUL character")
    path = Path(text)
    if path.is_absolute():
        if not settings.allow_outside_data:
            raise where.error(field_name, f"absolute image path {text!r} is outside the data directory "
                                          f"{data_root}; pass --allow-outside-data yes to read it", OUTSIDE_DATA)
        full = path
    else:
        full = Path(os.path.normpath(base_dir / path))
        root = Path(os.path.abspath(data_root))
        if not settings.allow_outside_data and not Path(os.path.abspath(full)).is_relative_to(root):
            raise where.error(field_name, f"image path {text!r} leads outside the data directory {data_root}; "
                                          f"pass --allow-outside-data yes to read it", OUTSIDE_DATA)
    if not settings.allow_outside_data:
        full = _inside(where, field_name, text, full, data_root)
    try:
        size = full.stat().st_size
    except OSError as exc:
        raise where.error(field_name, f"cannot read image {full}: {exc.strerror or exc}") from exc
    if not full.is_file():
        raise where.error(field_name, f"cannot read image {full}: not a file")
    check_payload_size(where, field_name, size, settings)
    ref = ImageRef(where, field_name, settings.max_image_pixels, file=full, max_side=settings.max_image_side)
    _open(ref, decode=False)
    return ref


def _inside(where: Where, field_name: str, text: str, full: Path, data_root: Path) -> Path:
    """``full`` with its links resolved, which must still lie inside ``data_root`` (its links resolved too): a link
    inside the data directory to a file outside it is refused as a path leading out is. The resolved path is the
    one kept and read."""
    target = Path(os.path.realpath(full))
    if not target.is_relative_to(Path(os.path.realpath(data_root))):
        raise where.error(field_name, f"image path {text!r} is a link to {target}, outside the data directory "
                                      f"{data_root}; pass --allow-outside-data yes to read it", OUTSIDE_DATA)
    return target


def payload_image(where: Where, field_name: str, payload: bytes, settings: LoadSettings) -> ImageRef:
    """An image given as its encoded bytes (a decoded base64 cell, a ``datasets`` Image ``bytes``)."""
    check_payload_size(where, field_name, len(payload), settings)
    ref = ImageRef(where, field_name, settings.max_image_pixels, payload=bytes(payload),
                   max_side=settings.max_image_side)
    _open(ref, decode=False)
    return ref


def check_payload_size(where: Where, field_name: str, n_bytes: int, settings: LoadSettings) -> None:
    """Refuse an encoded image larger than ``settings.max_image_bytes`` (before it is decoded)."""
    if n_bytes > settings.max_image_bytes:
        raise where.error(field_name, f"the encoded image is {n_bytes:,} bytes, over the limit of "
                                      f"{settings.max_image_bytes:,} (4 bytes per pixel of --max-image-pixels "
                                      f"{settings.max_image_pixels:,}, plus 1 MiB); raise --max-image-pixels to "
                                      f"read it", LARGE_IMAGE)


@contextlib.contextmanager
def _pillow_limit(max_pixels: int):
    """Pillow's own decompression-bomb check stands aside for ours while an image is opened.

    Its warning is silenced, and its hard limit (2 x ``Image.MAX_IMAGE_PIXELS``) is lifted to
    ours only when ours is larger, for the duration of the call; our check of the header size
    follows at once.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        previous = Image.MAX_IMAGE_PIXELS
        lift = previous is not None and max_pixels > previous
        if lift:
            Image.MAX_IMAGE_PIXELS = max_pixels
        try:
            yield
        finally:
            if lift:
                Image.MAX_IMAGE_PIXELS = previous


def cap_side(image: Image.Image, max_side: int) -> Image.Image:
    """``image`` scaled (bicubic, aspect kept, each side rounded, at least 1 px) so its longest side is
    ``max_side``, when it is longer; otherwise (or with ``max_side`` 0) ``image`` itself.

    >>> cap_side(Image.new("RGB", (2048, 1000)), 1024).size, cap_side(Image.new("RGB", (64, 64)), 1024).size
    ((1024, 500), (64, 64))
    """
    longest = max(image.size)
    if not max_side or longest <= max_side:
        return image
    scale = max_side / longest
    size = tuple(max(1, round(side * scale)) for side in image.size)
    return image.resize(size, Image.Resampling.BICUBIC)


def _too_large(ref: ImageRef, size_text: str) -> RowError:
    return ref.where.error(ref.field_name, f"image {ref.name} is {size_text} pixels, over the limit of "
                                           f"{ref.max_pixels:,} (raise it with --max-image-pixels)", LARGE_IMAGE)


#: The bytes of a JPEG marker with no length after it: TEM, RST0-7, SOI (and 0x00, a stuffed 0xFF in a scan).
_JPEG_STANDALONE = frozenset([0x00, 0x01, *range(0xD0, 0xD9)])


def jpeg_ends_whole(data: bytes) -> bool:
    """Whether a JPEG's segments and scans run to its end-of-image marker (EOI), skipping each segment by its length
    (so an EOI in a comment or an EXIF thumbnail does not count); bytes after the EOI are not read. Pillow refuses a
    JPEG without its EOI ("image file is truncated") unless ``ImageFile.LOAD_TRUNCATED_IMAGES`` is set.

    >>> jpeg = bytes.fromhex("ffd8" "fffe0004ffd9" "ffda0002" "12ff0034ffd0" "ffd9")  # SOI COM SOS scan EOI
    >>> jpeg_ends_whole(jpeg), jpeg_ends_whole(jpeg + b"after"), jpeg_ends_whole(jpeg[:-2]), jpeg_ends_whole(jpeg[:8])
    (True, True, False, False)
    """
    pos = 2  # after SOI
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            return False
        marker = data[pos + 1]
        if marker == 0xD9:
            return True
        if marker == 0xFF:  # a fill byte before a marker
            pos += 1
        elif marker in _JPEG_STANDALONE:
            pos += 2
        else:  # a segment: its length counts itself, not the marker
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")


def cut_short(im: Image.Image) -> str | None:
    """Why the opened image ``im`` is not whole (None: it is), without changing Pillow's globals: a PNG's chunks are
    read to IEND and their CRCs checked (``verify``), a JPEG's segments and scans to its EOI (``jpeg_ends_whole``),
    neither decoding a pixel; an image of another format is decoded (``load``)."""
    try:
        if im.format == "PNG":
            im.verify()
        elif im.format in ("JPEG", "MPO"):
            im.fp.seek(0)
            if not jpeg_ends_whole(im.fp.read()):
                return "its data ends before its end-of-image marker"
        else:
            im.load()
    except Exception as exc:  # any failure of a user's image is a data error, named as such
        return f"{type(exc).__name__}: {exc}"
    return None


def _open(ref: ImageRef, decode: bool) -> Image.Image | None:
    """Open ``ref``: the header's size against the limit, then (``decode``) the RGB pixels, or (not) whether it is
    whole (``cut_short``)."""
    source = ref.file if ref.file is not None else io.BytesIO(ref.payload)
    problem = None
    with _pillow_limit(ref.max_pixels):
        try:
            with Image.open(source) as im:
                width, height = im.size
                if width * height > ref.max_pixels:
                    problem = _too_large(ref, f"{width:,} x {height:,} = {width * height:,}")
                elif decode:
                    return im.convert("RGB")
                elif (why := cut_short(im)) is not None:
                    problem = ref.where.error(ref.field_name, f"image {ref.name} is cut short or damaged: {why}",
                                              DAMAGED_IMAGE)
                else:
                    return None
        except Image.DecompressionBombError as exc:
            match = re.search(r"\((\d+) pixels\)", str(exc))
            problem = _too_large(ref, f"{int(match.group(1)):,}" if match else "too many")
        except Exception as exc:  # any failure to decode a user's image is a data error, named as such
            kind = "read" if decode else "identify"
            problem = ref.where.error(ref.field_name, f"cannot {kind} image {ref.name}: "
                                                      f"{type(exc).__name__}: {exc}")
    raise problem
