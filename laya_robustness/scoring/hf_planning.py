"""The Hugging Face scorer's batch plan: a call's rows in windows whose pixels fit the pixel cache, each window in
length-sorted buckets of ``batch_size`` rows (one forward each), and the prefix plan of a window.

A batch-path call is scored in windows whose pixels still to encode fit half the pixel cache: the caller scores a
window before the next is prepared, so the pixels a window preprocessed are still cached when its buckets encode
them and an image is preprocessed once per call, not again when a call's pixels outgrow the cache (a SmolVLM photo
of 13 tiles is 65 MiB of pixels and mask; a batch-path chunk is 256 rows). Where the pixels fit, or no pixel cache
is kept, the call is one window. Buckets sort by the tokens each row's forward computes, so a forward pads little.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from laya_robustness.rows import Row
from laya_robustness.scoring import prefixes
from laya_robustness.scoring.cache import tensor_bytes
from laya_robustness.scoring.hf_images import PREFETCH_ROWS, ImageInputs, PreparedRow


def buckets(prepared: Sequence[PreparedRow], rows_per_forward: int, share: bool = False) -> list[list[int]]:
    """Row indices in forwards of ``rows_per_forward``, sorted (stable) by the tokens each row's forward
    computes: its whole one-pass sequence, or with ``share`` the tokens after the prefix of a row that has one
    (then its prefix length breaks ties). With ``share``, the rows with a prefix and those without, which run
    in separate forwards, are bucketed apart: a bucket holding both would cost two forwards."""
    def computed(i: int) -> tuple[int, int]:
        p = prepared[i]
        after = p.prefix_length if share and p.prefix else 0
        return p.alone_tokens - after, after

    everything = range(len(prepared))
    groups = ([[i for i in everything if prepared[i].prefix], [i for i in everything if not prepared[i].prefix]]
              if share else [everything])
    out = []
    for group in groups:
        order = sorted(group, key=computed)
        out += [order[i:i + rows_per_forward] for i in range(0, len(order), rows_per_forward)]
    return out


def window_prefixes(window_buckets, rows_per_forward: int) -> prefixes.WindowPrefixes:
    """The window's prefix plan: a forward over prefixes alone holds no more tokens than a bucket of the
    window's longest rows."""
    longest = max(p.alone_tokens for _, _, chunk in window_buckets for p in chunk)
    return prefixes.WindowPrefixes([[(p.prefix, p.prefix_length) for p in chunk if p.prefix]
                                    for _, _, chunk in window_buckets], rows_per_forward * longest)


class Planner:
    """Windows and buckets of a call's rows. ``prefix_stored(prepared, mode)``: the row's prefix is stored (with
    ``share`` it then needs no pixels); ``guard(rows, work)`` runs work naming the rows when it fails."""

    def __init__(self, images: ImageInputs, batch_size: int, prefix_stored: Callable, guard: Callable):
        self.images, self.batch_size, self.prefix_stored, self.guard = images, batch_size, prefix_stored, guard

    def windows(self, rows: Sequence[Row], path: str, share: bool) -> Iterator[list[tuple[int, PreparedRow]]]:
        """(index, prepared row) in row order, in windows whose pixels still to encode fit half the pixel cache
        (a row scored against a stored prefix, with ``share``, needs none); see the module doc."""
        images = self.images
        mode, budget = images.precision.mode(path), images.pixels.max_bytes // 2
        window: list[tuple[int, PreparedRow]] = []
        held, counted = 0, set()
        try:
            for i, row in enumerate(rows):
                images.start_prefetch(rows[i + PREFETCH_ROWS - 1:i + PREFETCH_ROWS] if i else rows[:PREFETCH_ROWS],
                                      mode)
                prepared = self.guard([row], lambda row=row: images.prepare(row))
                keys: dict = {}
                for key, group in ([] if share and self.prefix_stored(prepared, mode) else images.keyed_groups(row)):
                    if budget and key not in counted and key not in keys and (key, mode) not in images.feature_store:
                        size = images.pixels.touch(key)
                        if size is None:
                            size = tensor_bytes(self.guard([row], lambda: images.entry(key, group))[0])
                        keys[key] = size
                need = sum(keys.values())
                if window and held + need > budget:
                    yield window
                    window, held, counted = [], 0, set()
                    for key in keys:  # scoring the window touched its own pixels: make this row's the newest again
                        images.pixels.touch(key)
                window.append((i, prepared))
                held += need
                counted.update(keys)
            if window:
                yield window
        finally:
            images.cancel_prefetch()

    def window_buckets(self, rows: Sequence[Row], path: str, share: bool):
        """(buckets, the window's held features) of each window: the window cut into length-sorted buckets of
        ``batch_size`` rows, each bucket (row indices, rows, prepared rows)."""
        for window in self.windows(rows, path, share):
            prepared = [p for _, p in window]
            yield [([window[i][0] for i in chunk], [rows[window[i][0]] for i in chunk], [prepared[i] for i in chunk])
                   for chunk in buckets(prepared, self.batch_size, share)], {}

    def forward_chunks(self, rows: Sequence[Row], path: str):
        """(row indices, rows, prepared rows, the window's held features) of each forward over whole prompts."""
        for window_buckets, held in self.window_buckets(rows, path, share=False):
            for indices, chunk_rows, chunk_prepared in window_buckets:
                yield indices, chunk_rows, chunk_prepared, held
