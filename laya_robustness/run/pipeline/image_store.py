"""Where a run's images wait between uses: a store of decoded images bounded by bytes, the sources that make a
waiting image again (a data file decoded, one row's variants in one family rebuilt), the sampled rows read
into it, and a chunk's rows given their pixels.

A run's rows carry ``rows.PendingImage`` handles (content key, mode, size, source) instead of pixels. Loading
decodes every sampled image once, to take its content key (so a bad image still stops the run before any
scoring), and keeps it in the store while there is room. A chunk's rows get their pixels from the store or,
for what it does not hold, from their sources, each source once and the sources side by side on a thread
pool. What is held at once is the store's bound and the chunks in hand, whatever the number of rows.

>>> from PIL import Image
>>> store = ImageStore(max_bytes=3 * 4 * 4)                     # room for one 4 x 4 RGB image
>>> source = ImageSource(store, lambda: [Image.new("RGB", (4, 4), "red")], "a red square")
>>> pending = source.waiting(Image.new("RGB", (4, 4), "red"))
>>> pending.load().getpixel((0, 0)), store.stats["made"]         # held: not made again
((255, 0, 0), 0)
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from PIL import Image

from laya_robustness.families import BUILD_THREADS
from laya_robustness.loaders import SourceRow
from laya_robustness.rows import PendingImage, Row, image_digest, remember_digest
from laya_robustness.run.errors import HarnessError

#: Default bound of the store (``--image-cache-mb``): 72 decoded 640 x 480 photos, or 5,400 images of 64 x 64.
DEFAULT_IMAGE_CACHE_BYTES = 64 << 20
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def image_bytes(image: Image.Image) -> int:
    """The bytes of an image's decoded pixels (``width * height * bytes per pixel``)."""
    return decoded_bytes(image.mode, image.size)


def decoded_bytes(mode: str, size: tuple[int, int]) -> int:
    """The bytes of the decoded pixels of an image of this mode and size (a PendingImage's, unread)."""
    per_band = 4 if mode in ("I", "F") else 2 if mode.startswith("I;16") else 1
    return size[0] * size[1] * Image.getmodebands(mode) * per_band


class ImageStore:
    """Decoded images by content key (``image_digest``), held while their bytes fit ``max_bytes``: an image that
    does not fit is not held (what is held is never pushed out by what comes later, so a pass over more images
    than fit keeps the first ones instead of cycling through all); ``forget`` lets images go. ``stats`` counts
    images decoded at load, images made again by their sources, images handed out from the store, and the
    most bytes it held (``peak_bytes``)."""

    def __init__(self, max_bytes: int = DEFAULT_IMAGE_CACHE_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes, self.nbytes = max_bytes, 0
        self._held: dict[str, tuple[Image.Image, int]] = {}
        self._lock = threading.Lock()
        self.stats = {"decoded": 0, "made": 0, "hits": 0, "peak_bytes": 0}

    def get(self, digest: str) -> Image.Image | None:
        """The image of ``digest`` while it is held, else None."""
        with self._lock:
            held = self._held.get(digest)
            self.stats["hits"] += held is not None
        return None if held is None else held[0]

    def put(self, digest: str, image: Image.Image) -> None:
        """Hold ``image`` if its bytes fit beside what is held."""
        size = image_bytes(image)
        with self._lock:
            if digest not in self._held and self.nbytes + size <= self.max_bytes:
                self._held[digest] = (image, size)
                self.nbytes += size
                self.stats["peak_bytes"] = max(self.stats["peak_bytes"], self.nbytes)

    def forget(self, digests: Iterable[str]) -> None:
        """Let these images go (a scored chunk's variants: no later row waits for them)."""
        with self._lock:
            for digest in digests:
                held = self._held.pop(digest, None)
                if held is not None:
                    self.nbytes -= held[1]

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n


class ImageSource:
    """What makes waiting images again: ``make()`` gives them (one data file decoded, or one row's variant images in
    a family, rebuilt), named ``what`` in errors; ``keep`` says whether what it makes is held in the store for
    later chunks (a source image, which every family reads) or only for the chunk that asked (a variant).

    A source whose ``make`` is ``portable`` (``DecodeImage``, ``run.pipeline.variant_rows.VariantBuild``) travels with its
    rows to a Ray actor, which makes the pixels there: it is pickled without its store (``store`` None: nothing held
    until ``bind_images`` gives it the actor's) and with ``make.travelling()``."""

    def __init__(self, store: ImageStore | None, make: Callable[[], Sequence[Image.Image]], what: str,
                 keep: bool = True):
        self.store, self.make, self.what, self.keep = store, make, what, keep

    @property
    def portable(self) -> bool:
        return getattr(self.make, "portable", False)

    def __reduce__(self):
        if not self.portable:
            raise TypeError(f"{self.what}: its images are made by {self.make!r}, which cannot travel")
        return ImageSource, (None, self.make.travelling(), self.what, self.keep)

    def waiting(self, image: Image.Image) -> PendingImage:
        """``image`` as a PendingImage of this source, held in the store if there is room."""
        digest = image_digest(image)
        if self.store is not None:
            self.store.put(digest, image)
        return PendingImage(digest, image.mode, image.size, self)

    def made(self) -> dict[str, Image.Image]:
        """Every image the source makes, by content key (held in the store when ``keep``)."""
        images = {image_digest(im): im for im in self.make()}
        if self.store is not None:
            self.store.count("made", len(images))
            if self.keep:
                for digest, image in images.items():
                    self.store.put(digest, image)
        return images

    def held(self, digest: str) -> Image.Image | None:
        """The image of ``digest`` while the store holds it."""
        return None if self.store is None else self.store.get(digest)

    def __call__(self, digest: str) -> Image.Image:
        """The image of ``digest``: held, or made again (``PendingImage.load``)."""
        image = self.held(digest)
        return image if image is not None else self.pick(self.made(), digest)

    def pick(self, images: dict[str, Image.Image], digest: str) -> Image.Image:
        """The image of ``digest`` among what the source made (a HarnessError when it made other pixels)."""
        if digest not in images:
            raise HarnessError(f"{self.what} gave other pixels than when the run first read it (content key "
                               f"{digest[:12]}...): the data changed on disk, or a builder is not deterministic")
        return images[digest]


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:  # made once, whichever thread asks first
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(BUILD_THREADS, thread_name_prefix="laya-images"))
        return _POOL[0]


def parallel_map(fn: Callable, items: Sequence) -> list:
    """``[fn(x) for x in items]``, side by side on a thread pool when there are several (decoding and image work
    in Pillow and numpy release the GIL)."""
    if len(items) < 2 or BUILD_THREADS < 2:
        return [fn(x) for x in items]
    return list(_pool().map(fn, items))


def streamed_map(fn: Callable, items: Sequence, ahead: int) -> Iterator:
    """``fn(x) for x in items``, in order, on the thread pool with at most ``ahead`` results under way or waiting
    to be taken: the pool goes on with the next items while the caller takes one, and what is held at once stays
    ``ahead`` results whatever the number of items. The calls not started when the caller stops are cancelled.

    >>> list(streamed_map(lambda x: x * x, range(10), ahead=3))
    [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    """
    if len(items) < 2 or BUILD_THREADS < 2 or ahead < 2:
        yield from (fn(x) for x in items)
        return
    pool, rest = _pool(), iter(items)
    pending = deque(pool.submit(fn, x) for _, x in zip(range(ahead), rest))
    try:
        while pending:
            result = pending.popleft().result()
            for x in rest:  # one more under way before the caller takes this one
                pending.append(pool.submit(fn, x))
                break
            yield result
    finally:
        for future in pending:
            future.cancel()


def rows_with_pixels(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with their waiting images' pixels: from the store, or made again by their sources (each source
    once, side by side on a thread pool). Rows without waiting images are returned as they are."""
    waiting = {im.digest: im for r in rows for im in r.images if isinstance(im, PendingImage)}
    have: dict[str, Image.Image] = {}
    missing: dict[int, ImageSource] = {}
    for digest, im in waiting.items():
        held = im.source.held(digest) if isinstance(im.source, ImageSource) else im.load()
        if held is not None:
            have[digest] = held
        else:
            missing.setdefault(id(im.source), im.source)
    for images in parallel_map(ImageSource.made, list(missing.values())):
        have.update(images)
    for digest, im in waiting.items():
        remember_digest(im.source.pick(have, digest) if digest not in have else have[digest], digest)
    return [r.replaced(images=tuple(have[im.digest] if isinstance(im, PendingImage) else im for im in r.images))
            if any(isinstance(im, PendingImage) for im in r.images) else r for r in rows]


def waiting_rows(rows: Sequence[SourceRow], store: ImageStore) -> list[Row]:
    """The rows of validated source rows with their images waiting in ``store``: each image decoded once now, to
    take its content key (a RowError for one that does not decode), held while there is room; the rows that
    name the same image file share one PendingImage."""
    seen: dict[tuple, PendingImage] = {}

    def waiting(ref) -> PendingImage:
        key = (ref.file, ref.max_side)
        if ref.file is None or key not in seen:
            store.count("decoded")
            decode = DecodeImage(ref)
            seen[key] = ImageSource(store, decode, f"image {ref.name}").waiting(decode()[0])
        return seen[key]

    return [dataclasses.replace(r.row, images=tuple(waiting(ref) for ref in r.images)) for r in rows]


class DecodeImage:
    """``make`` of a source image: ``ref`` (``loaders.image_refs.ImageRef``) decoded. It travels (``travelling``) as its
    encoded bytes, so an actor on another machine decodes the same pixels without the file: once Ray is started in
    this process, as one Ray object made once (``shared``: every chunk that names the image carries the object's
    reference, not the bytes, so what the front end sends does not grow with the chunks; ``shared_bytes`` says
    who writes it), else as the bytes."""

    portable = True

    def __init__(self, ref, shared=None):
        self.ref, self.shared = ref, shared
        self._travelling: DecodeImage | None = None

    def __call__(self) -> list[Image.Image]:
        if self.shared is None:
            return [self.ref.decode()]
        import ray

        return [dataclasses.replace(self.ref, payload=ray.get(self.shared)).decode()]

    def travelling(self) -> DecodeImage:
        if self.ref.file is None and self.ref.payload is None:
            return self  # travels as the Ray object it came as
        if self._travelling is None:
            ray = sys.modules.get("ray")
            if ray is not None and ray.is_initialized():
                self._travelling = DecodeImage(dataclasses.replace(self.ref, file=None, payload=None),
                                               shared_bytes(ray, self.ref))
            elif self.ref.file is None:
                return self
            else:
                return DecodeImage(dataclasses.replace(self.ref, file=None, payload=Path(self.ref.file).read_bytes()))
        return self._travelling

    def __getstate__(self) -> dict:
        return {"ref": self.ref, "shared": self.shared, "_travelling": None}


class EncodedReader:
    """A Ray actor on the front end's node that reads image files into Ray's object store (``shared_bytes``)."""

    def __init__(self):
        self.reads = 0

    def read(self, ref) -> bytes:
        """The encoded bytes of image ``ref`` (``ImageRef.read``: a RowError naming file, line and field if the
        file cannot be read)."""
        self.reads += 1
        return ref.read()

    def files_read(self) -> int:
        """How many files it has read (so a check can tell that the bytes came through it)."""
        return self.reads


_READER: dict = {}  # the EncodedReader of this process's Ray session: {"job": its job id, "actor": its handle}


def shared_bytes(ray, ref):
    """A Ray object holding ``ref``'s encoded bytes. A file is read into the object store by one ``EncodedReader``
    actor on this process's own node (same files; the path made absolute), started on first use in each Ray
    session: the bytes never pass through this process, so the object-store pages it maps do not grow with the
    images it sends. A payload, or a file under Ray Client (this process is then no node of the cluster, and the
    files may be nowhere else), is put from here."""
    if ref.file is None or ray.util.client.ray.is_connected():
        return ray.put(ref.read())
    context = ray.get_runtime_context()
    if _READER.get("job") != context.get_job_id():
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(context.get_node_id(), soft=False)
        reader = ray.remote(num_cpus=0, max_restarts=3, max_task_retries=3)(EncodedReader)
        _READER.update(job=context.get_job_id(), actor=reader.options(scheduling_strategy=here).remote())
    return _READER["actor"].read.remote(dataclasses.replace(ref, file=Path(ref.file).absolute()))


def bind_images(rows: Sequence[Row], store: ImageStore) -> list[Row]:
    """``rows`` (received from another process) with their waiting images' sources holding what they make in
    ``store`` (a source that came without one)."""
    for row in rows:
        for im in row.images:
            if isinstance(im, PendingImage) and isinstance(im.source, ImageSource) and im.source.store is None:
                im.source.store = store
    return list(rows)
