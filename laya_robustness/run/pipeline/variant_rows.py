"""A family's variant rows of one dataset, built so that their images wait in the run's image store instead of
all being held at once (how much is held stays bounded by bytes whatever the number of rows).

Three rules, by what the family's declaration says:

- a family that does not read pixels (``reads_pixels=False``: it keeps, drops or moves images between rows, as
  the text families, image_shuffle's donors and option_set's borrowed distractors do) is built once over the
  whole dataset on rows whose images wait: its rows carry the source images' PendingImages;
- a row-wise family that reads pixels (the image families) is built one source row at a time, a few side by
  side on the build threads when the images are large enough to gain from it (``PARALLEL_BUILD_MIN_PIXELS``),
  which also key the new images (a bounded stream, ``images.streamed_map``: no more than ``BUILD_WINDOW_ROWS``
  source rows' variants are held before they are keyed and stored); each new image is held in the store while
  there is room and then let go, and a chunk that finds it gone rebuilds that source row's variants (its
  ``ImageSource``);
- a family that reads pixels and is not row-wise cannot be rebuilt row by row: it is built over the whole
  dataset with every image decoded, and its images are held until it is scored (its memory grows with the data).

Either way the rows, their order and their content keys are those of ``families.build_variants`` on decoded
rows, so the records and the journal keys are the same.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from laya_robustness.families import BUILD_THREADS, build_variants, find_family, get_family
from laya_robustness.rows import PendingImage, Row, image_digest, remember_digest
from laya_robustness.run.pipeline.image_store import ImageSource, ImageStore, decoded_bytes, streamed_map
from laya_robustness.scoring.malloc import give_back_freed_memory

#: Source rows of a pixel family under way at once on the build threads (their variants held until stored).
BUILD_WINDOW_ROWS = 2 * BUILD_THREADS
#: Variant images this process built (``built``: in ``family_variants``), kept in Ray's object store (``kept``),
#: took from there (``fetched``) and built again where they were scored (``built_again``).
IMAGE_COUNTS: Counter = Counter()
_COUNTS_LOCK = threading.Lock()  # counted from the image threads (``run.pipeline.image_store``) as well
#: Seconds an actor waits for variant images another actor keeps before it builds them itself.
FETCH_TIMEOUT_S = 60.0
#: Mean source-image pixels a row from which a pixel family is built on the build threads; below it, one thread
#: builds faster, since the Python work between Pillow and numpy calls, which holds the GIL, outweighs the calls
#: (measured: docs/performance.md).
PARALLEL_BUILD_MIN_PIXELS = 256 * 256


def family_variants(name: str, rows: Sequence[Row], seed: int, store: ImageStore,
                    on_built: Callable[[VariantBuild, list], None] | None = None) -> list[Row]:
    """The rows family ``name`` scores for ``rows`` (the source rows of one dataset), their images waiting in
    ``store`` where the family's rule allows (see the module doc). ``on_built(build, images)`` is given each source
    row's new images as they are built, with the ``VariantBuild`` that would build them again (a Ray actor keeps
    them for the actor that scores them: ``VariantBuild.ref``)."""
    family = get_family(name)
    if not family.reads_pixels or not family.row_wise:
        return build_variants(name, rows, seed)
    out: list[Row] = []
    ahead = BUILD_WINDOW_ROWS if _mean_pixels(rows) >= PARALLEL_BUILD_MIN_PIXELS else 1
    for row, variants in zip(rows, streamed_map(lambda r: _keyed(build_variants(name, [r], seed)), rows, ahead)):
        source = ImageSource(store, VariantBuild(name, row, seed), f"{name} of row {row.row_id!r}", keep=False)
        passed = {im.digest: im for im in row.images if isinstance(im, PendingImage)}
        built = [im for v in variants for im in v.images if not isinstance(im, PendingImage)
                 and image_digest(im) not in passed]
        count_images("built", len(built))
        if on_built is not None:
            on_built(source.make, built)
        out += [_waiting(variant, passed, source) for variant in variants]
    return out


def builds_on_executor(name: str) -> bool:
    """Whether family ``name``'s variants can be built where they are scored (a Ray actor): a row-wise family
    that reads pixels, whose images travel as the recipe that builds them (``VariantBuild``)."""
    family = get_family(name)
    return family.reads_pixels and family.row_wise


def holds_images(name: str) -> bool:
    """Whether family ``name``'s variant images are all held from its build until it is scored: a family that
    reads pixels and is not row-wise (see the module doc); the others' images wait in the store. A name no family
    has holds none (its build raises where it is built)."""
    family = find_family(name)
    return family is not None and family.reads_pixels and not family.row_wise


def variant_rows_per_row(name: str) -> int:
    """How many variant rows family ``name`` is expected to make of a source row: its declared variant names (a
    pattern, ending in ``*``, counts one), at least one. An estimate: a row may make fewer (no image) or more."""
    declared = get_family(name).variants
    return max(1, sum(1 for variant in declared if not variant.endswith("*")) + any(v.endswith("*") for v in declared))


def expected_chunks(name: str, n_rows: int, chunk_rows: int) -> list[int]:
    """For each of ``n_rows`` source rows, the chunk of ``chunk_rows`` variant rows its first variant row is
    expected to land in, each row taken to make ``variant_rows_per_row(name)`` rows:
    ``chunk(j) = (j * per_row) // chunk_rows``.

    >>> expected_chunks("rotation", 5, 4)
    [0, 0, 1, 1, 2]
    """
    per_row = variant_rows_per_row(name)
    return [(j * per_row) // max(1, chunk_rows) for j in range(n_rows)]


def adopt(variants: Sequence[Row], rows: Sequence[Row], store: ImageStore) -> list[Row]:
    """Variant rows built in another process, made this process's own: each variant image's recipe builds from
    the source row read here (``rows``: its images from their files, not the bytes they travelled as) and keeps
    what it builds in ``store``; a source image passed through is this process's own waiting image."""
    by_id = {row.row_id: row for row in rows}
    passed = {im.digest: im for row in rows for im in row.images if isinstance(im, PendingImage)}
    out = []
    for variant in variants:
        images = []
        for im in variant.images:
            if isinstance(im, PendingImage) and im.digest in passed:
                im = passed[im.digest]
            elif isinstance(im, PendingImage) and isinstance(getattr(im.source, "make", None), VariantBuild):
                im.source.make.row, im.source.store = by_id[im.source.make.row.row_id], store
            images.append(im)
        out.append(variant.replaced(images=tuple(images)))
    return out


def _mean_pixels(rows: Sequence[Row]) -> float:
    """The mean over ``rows`` of a row's image pixels (width x height, summed over its images)."""
    return sum(im.size[0] * im.size[1] for row in rows for im in row.images) / max(len(rows), 1)


def _keyed(variants: list[Row]) -> list[Row]:
    """``variants`` with each image's content key taken (``image_digest`` memoises it on the image), on the build
    thread that made them rather than on the thread that stores them."""
    for variant in variants:
        for image in variant.images:
            image_digest(image)
    return variants


def count_images(key: str, n: int) -> None:
    """Add ``n`` to ``IMAGE_COUNTS[key]``."""
    with _COUNTS_LOCK:
        IMAGE_COUNTS[key] += n


def image_counts() -> dict:
    """A copy of ``IMAGE_COUNTS``."""
    with _COUNTS_LOCK:
        return dict(IMAGE_COUNTS)


class VariantBuild:
    """``make`` of one source row's variant images in family ``name``: the row's variants built again. It travels
    (``run.pipeline.image_store.ImageSource``) with the row and its images' sources, so a Ray actor builds them where it
    scores
    them. ``ref``: where the actor that first built them keeps them (a Ray object of (content key, image) pairs,
    ``nbytes`` decoded): another actor takes them from there instead of building them again, and builds them again
    only when the object is gone (its owner lost); ``release`` lets it go."""

    portable = True

    def __init__(self, name: str, row: Row, seed: int):
        self.name, self.row, self.seed = name, row, seed
        self.ref, self.nbytes = None, 0

    def __call__(self) -> list:
        if self.ref is not None:
            kept = _fetched(self.ref)
            if kept is not None:
                count_images("fetched", len(kept))
                return kept
        images = [im for variant in build_variants(self.name, [self.row], self.seed) for im in variant.images]
        count_images("built_again", len(images))
        return images

    def keep(self, images: list) -> None:
        """Keep ``images`` (this row's new images, just built) in Ray's object store for the actor that scores them."""
        import ray

        self.ref = ray.put([(image_digest(im), _portable(im)) for im in images])
        count_images("kept", len(images))
        self.nbytes = sum(decoded_bytes(im.mode, im.size) for im in images)

    def release(self) -> None:
        self.ref = None

    def travelling(self) -> VariantBuild:
        return self


def _fetched(ref) -> list | None:
    """The images a Ray object keeps (their content keys known without hashing again), or None when it is gone."""
    import ray
    from ray.exceptions import ObjectLostError

    try:
        pairs = ray.get(ref, timeout=FETCH_TIMEOUT_S)
    except (ObjectLostError, ray.exceptions.GetTimeoutError):
        return None
    images = [Image.fromarray(kept) if isinstance(kept, np.ndarray) else kept for _, kept in pairs]
    for (digest, _), image in zip(pairs, images):
        remember_digest(image, digest)
    return images


def _portable(image):
    """``image`` as Ray keeps it: the array of its pixels where the array gives them back exactly (L, RGB, RGBA: Ray
    stores and reads it without copying, where an image is pickled through ``tobytes``, 12 times slower), else the
    image itself."""
    return np.asarray(image) if image.mode in ("L", "RGB", "RGBA") else image


def _waiting(variant: Row, passed: dict[str, PendingImage], source: ImageSource) -> Row:
    """``variant`` with its new images waiting in the store (an image passed through from its source row keeps
    the source's PendingImage, ``passed`` by content key)."""
    images = tuple(im if isinstance(im, PendingImage) else passed.get(image_digest(im)) or source.waiting(im)
                   for im in variant.images)
    return variant.replaced(images=images)


def variant_digests(row: Row) -> list[str]:
    """The digests of ``row``'s images that a pixel family made (waiting in the store with ``keep=False``): no
    row of another cell asks for them, and the run lets them go once its own rows are done."""
    return [im.digest for im in row.images
            if isinstance(im, PendingImage) and isinstance(im.source, ImageSource) and not im.source.keep]


class VariantImages:
    """A cell's variant images, each let go as soon as the last row about it is done (scored, or found in the
    journal): the store forgets it, and so does ``holder`` where it can (``forget_images``: the scorer's pixels,
    vision features and prompt prefix; on Ray, the executor tells its actors' scorers), and once every image of a
    source row is let go, the Ray object that kept them (``VariantBuild.release``). An image whose rows span
    two chunks stays until the second, so it is neither rebuilt nor encoded again, and what the run holds of
    variant images does not grow with the rows. ``add(rows)`` gives it more of the cell's rows (a cell whose rows
    arrive as they are built).

    ``give_back``: malloc keeps freed memory (``scoring.malloc``): it is given back once the images let go since the
    last time hold half the store's budget, and when the cell is over."""

    def __init__(self, rows: Sequence[Row], store: ImageStore, holder=None, give_back: bool = False):
        self.store, self.holder, self.give_back = store, holder, give_back
        self.waiting: Counter = Counter()
        self.sizes: dict[str, int] = {}
        self.builds: dict[str, VariantBuild] = {}  # content key -> the build whose Ray object keeps it
        self.images_of: Counter = Counter()  # id(build) -> its images still waited for
        self.let_go = 0  # decoded bytes of the images let go since freed memory was last given back
        self.add(rows)

    def add(self, rows: Sequence[Row]) -> None:
        """More rows of the cell, whose variant images wait until they are done too."""
        for row in rows:
            for im in row.images:
                if isinstance(im, PendingImage) and isinstance(im.source, ImageSource) and not im.source.keep:
                    if im.digest not in self.waiting:
                        self.sizes[im.digest] = decoded_bytes(im.mode, im.size)
                        build = im.source.make
                        if getattr(build, "ref", None) is not None and im.digest not in self.builds:
                            self.builds[im.digest] = build
                            self.images_of[id(build)] += 1
                    self.waiting[im.digest] += 1

    @property
    def kept_bytes(self) -> int:
        """Decoded bytes of the images that Ray objects keep for this cell's rows still to be done."""
        return sum(build.nbytes for build in {id(b): b for b in self.builds.values() if b.ref is not None}.values())

    def done(self, rows: Sequence[Row]) -> int:
        """``rows`` are done: let go of the images no row still waits for; their decoded bytes."""
        gone = []
        for row in rows:
            for digest in variant_digests(row):
                self.waiting[digest] -= 1
                if self.waiting[digest] == 0:
                    del self.waiting[digest]
                    gone.append(digest)
        self._forget(gone)
        freed = sum(self.sizes.pop(digest) for digest in gone)
        self.let_go += freed
        if self.give_back and self.let_go > self.store.max_bytes // 2:
            give_back_freed_memory()
            self.let_go = 0
        return freed

    def all_done(self) -> None:
        """The cell is over (finished or stopped): let go of every image still held (and give the memory back)."""
        gone, self.waiting = list(self.waiting), Counter()
        self._forget(gone)
        for build in self.builds.values():
            build.release()
        self.builds, self.images_of = {}, Counter()
        if self.give_back:
            give_back_freed_memory()

    def _forget(self, digests: list[str]) -> None:
        if not digests:
            return
        self.store.forget(digests)
        for digest in digests:
            build = self.builds.pop(digest, None)
            if build is not None:
                self.images_of[id(build)] -= 1
                if not self.images_of[id(build)]:
                    del self.images_of[id(build)]
                    build.release()
        forget = getattr(self.holder, "forget_images", None)
        if forget is not None:
            forget(digests)
