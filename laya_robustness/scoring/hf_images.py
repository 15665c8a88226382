"""The Hugging Face scorer's inputs: a row's prompt and option ids, its images' pixels and vision features, each made
once per content and kept in stores bounded by bytes, large images preprocessed ahead on a thread pool.

Images are preprocessed once per content (sha256 of mode, size and pixels: ``rows.image_digest``) and encoded once
per content and precision mode; both stores are bounded by bytes (``cache.DEFAULT_*_CACHE_BYTES``), the features' a
segmented LRU that an image family's many new variants do not flush. An image's prompt layout (its placeholder text
and the processor outputs positions need) outlives its pixels, so a new question about a known image does not
preprocess it again. Templated prompts and tokenized texts are cached per text. ``stats`` counts vision encodes and
forwards, preprocessed image groups, and pixel, feature and prompt cache hits.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from laya_robustness.rows import Row, image_digest
from laya_robustness.scoring import layout
from laya_robustness.scoring.cache import ByteLRU, SegmentedLRU, tensor_bytes
from laya_robustness.scoring.hf_forward import Precision
from laya_robustness.scoring.prompt import user_text

TEXT_CACHE_ENTRIES = 1 << 16
#: Bound of the per-image prompt layouts (placeholder text, grid sizes): about 7 KB for a 13-tile SmolVLM photo.
LAYOUT_CACHE_BYTES = 256 << 20
#: Image groups are preprocessed ahead of the rows that need them on this many threads, at most this many rows
#: ahead, when the work is large: a group of at least PREFETCH_MIN_PIXELS input pixels, or a processor whose last
#: output was at least PREFETCH_MIN_OUTPUT_BYTES. Resizing and normalising release the GIL on large arrays but not
#: on small ones, where a thread only contends (measured: docs/performance.md).
PREPROCESS_THREADS = min(8, os.cpu_count() or 1)
PREFETCH_ROWS = 2 * PREPROCESS_THREADS
PREFETCH_MIN_PIXELS = 512 * 384
PREFETCH_MIN_OUTPUT_BYTES = 1 << 20
#: Pixel values one vision forward takes at most (as many as 16 RGB images of 512 px): the encoder's
#: activations grow with the tiles it sees together, and 16 groups of SmolVLM-256M photos (13-17 tiles of
#: 512 px each) would be 272 tiles at once; such groups are encoded one at a time instead.
VISION_BATCH_VALUES = 16 * 3 * 512 * 512
_PREPROCESS_POOL: list[ThreadPoolExecutor] = []


@dataclass(frozen=True)
class PreparedRow:
    """A row ready for the language model: its prompt, its image groups (content keys), its options' ids and its
    shareable prefix (``prefix_length`` leading prompt tokens, keyed by ``prefix``; None: nothing shared)."""

    row_id: str
    prompt: layout.Prompt
    groups: tuple[tuple[str, ...], ...]
    options: tuple[tuple[int, ...], ...]  # display order
    prefix_length: int = 0
    prefix: tuple | None = None  # (image group keys, prefix ids)

    @property
    def alone_tokens(self) -> int:
        """Language-model tokens of the row's one-pass sequence: its prompt and every option but its last token."""
        return len(self.prompt.ids) + sum(len(o) - 1 for o in self.options)


@dataclass
class EncodedRow:
    """Prompt ids, pixels (n_images, 3, H, W) or None, pixel mask, and the options' ids (Idefics-shaped inputs)."""

    prompt_ids: list[int]
    pixel_values: "object | None"
    pixel_mask: "object | None"
    option_ids: list[list[int]]


def _preprocess_pool() -> ThreadPoolExecutor:
    if not _PREPROCESS_POOL:
        _PREPROCESS_POOL.append(ThreadPoolExecutor(PREPROCESS_THREADS, thread_name_prefix="laya-preprocess"))
    return _PREPROCESS_POOL[0]


class _TextCache(OrderedDict):
    """A small LRU by entry count for templated prompts and token ids."""

    def __init__(self, max_entries: int = TEXT_CACHE_ENTRIES):
        super().__init__()
        self.max_entries = max_entries

    def lookup(self, key, make):
        if key in self:
            self.move_to_end(key)
            return self[key], True
        value = self[key] = make()
        if len(self) > self.max_entries:
            self.popitem(last=False)
        return value, False


class _PromptCache(ByteLRU):
    """The prompts, keyed ``(text, image group keys)``: an LRU of ``max_entries`` (each entry counts one) indexed
    by image content key, so that ``forget`` drops an image's prompts without scanning the others."""

    def __init__(self, max_entries: int = TEXT_CACHE_ENTRIES):
        super().__init__(max_entries, digests_of=_digests)

    def lookup(self, key, make):
        if key in self:
            return self.get(key), True
        value = make()
        self.put(key, value, nbytes=1)
        return value, False


def _digests(prompt_key) -> set[str]:
    return {digest for group in prompt_key[1] for digest in group}


def pixel_values(tensors: dict) -> int:
    """The floating-point values (pixels) among a group's processor tensors; masks and grids do not count."""
    return sum(t.nelement() for t in tensors.values() if t.is_floating_point())


def vision_chunks(groups: Sequence[tuple], max_groups: int, max_values: int) -> list[list[tuple]]:
    """``(key, tensors)`` groups in consecutive chunks of at most ``max_groups`` groups and ``max_values``
    floating-point values (pixels) in all; a group larger than ``max_values`` is a chunk of its own."""
    chunks: list[list[tuple]] = []
    values = 0
    for group in groups:
        size = pixel_values(group[1])
        if not chunks or len(chunks[-1]) >= max_groups or values + size > max_values:
            chunks.append([])
            values = 0
        chunks[-1].append(group)
        values += size
    return chunks


class ImageInputs:
    """Rows made ready for the language model (``prepare``) and their image groups' vision features (``features``),
    with the stores that keep what each took: pixels, prompt layouts, vision features, prompts and token ids.

    ``prefetch``: preprocess large groups ahead on the thread pool (None decides per group by its size, see
    ``PREFETCH_MIN_PIXELS``); ``vision_batch_size`` groups and ``vision_batch_values`` pixels at most a vision
    forward."""

    def __init__(self, adapter, precision: Precision, stats: dict, *, feature_cache_bytes: int,
                 pixel_cache_bytes: int, vision_batch_size: int):
        self.adapter, self.precision, self.stats = adapter, precision, stats
        self.device = precision.device
        self.cache_bytes = (feature_cache_bytes, pixel_cache_bytes)
        self.vision_batch_size = vision_batch_size
        self.vision_batch_values = VISION_BATCH_VALUES
        self.prefetch: bool | None = None
        self.last_output_bytes = 0
        self._empty()

    def _empty(self) -> None:
        # Keyed by an image group (its images' content keys) and (group, mode).
        self.feature_store = SegmentedLRU(self.cache_bytes[0], digests_of=lambda key: key[0])
        self.pixels = ByteLRU(self.cache_bytes[1], digests_of=lambda group: group)
        self.layouts = ByteLRU(LAYOUT_CACHE_BYTES, digests_of=lambda group: group)
        self.pending: dict = {}  # image key -> future of its preprocessing, submitted ahead of its row
        self.templates, self.token_ids, self.prompts = _TextCache(), _TextCache(), _PromptCache()

    def renewed(self, adapter, precision: Precision, stats: dict) -> "ImageInputs":
        """Inputs like these (the same bounds and settings) for another adapter and precision, with empty stores."""
        other = copy.copy(self)
        other.adapter, other.precision, other.stats, other.device = adapter, precision, stats, precision.device
        other._empty()
        return other

    def forget(self, digests: set) -> None:
        """Let go of the pixels, prompt layouts, prompts and vision features of these images (content keys)."""
        for store in (self.pixels, self.layouts, self.feature_store, self.prompts):
            store.forget(digests)

    # -- preparing rows -------------------------------------------------------------------------

    def entry(self, key: tuple[str, ...], images: tuple) -> tuple[dict, list[str]]:
        """The processor's tensors and placeholder texts of an image group: from the pixel store, the prefetch, or
        preprocessed now (then stored)."""
        entry = self.pixels.get(key)
        if entry is not None:
            self.stats["pixel_cache_hits"] += 1
            return entry
        pending = self.pending.pop(key, None)
        entry = pending.result() if pending is not None else self.adapter.process_group(images)
        self.stats["image_preprocess"] += 1
        self.last_output_bytes = tensor_bytes(entry[0])
        self.pixels.put(key, entry, self.last_output_bytes)
        return entry

    def _layout(self, key: tuple[str, ...], images: tuple) -> tuple[dict, list[str]]:
        """What a prompt needs of an image group (its placeholder text and ``layout_inputs``), kept after its
        pixels leave the pixel cache, so a new question on a known image does not preprocess it again."""
        layout_entry = self.layouts.get(key)
        if layout_entry is None:
            tensors, replacements = self.entry(key, images)
            layout_entry = ({name: tensors[name] for name in self.adapter.layout_inputs}, replacements)
            self.layouts.put(key, layout_entry, tensor_bytes(layout_entry[0]) + sum(map(len, replacements)))
        return layout_entry

    def _ids(self, text: str, answer: bool = False) -> list[int]:
        ids, _ = self.token_ids.lookup((answer, text), lambda: (
            self.adapter.tokenize_answer(text) if answer else self.adapter.tokenize_prompt(text)))
        return ids

    def _prompt(self, text: str, keys: tuple, groups: list[tuple]) -> tuple[layout.Prompt, int]:
        """The prompt of a templated text with these image groups (expanded, tokenized, positioned) and the
        length of its shareable prefix."""
        entries = [self._layout(k, g) for k, g in zip(keys, groups)]
        ids = self._ids(self.adapter.expand(text, [r for _, reps in entries for r in reps]))
        blocks = self.adapter.prompt_blocks(ids)
        prompt = layout.Prompt(tuple(ids), self.adapter.prompt_positions(ids, [t for t, _ in entries]), blocks)
        return prompt, self.adapter.prefix_length(ids, blocks)

    def keyed_groups(self, row: Row) -> list[tuple[tuple[str, ...], tuple]]:
        """(content key, images) of each image group of a row, as the adapter groups them."""
        return [(tuple(image_digest(im) for im in g), g) for g in self.adapter.image_groups(row.images)]

    def by_key(self, rows: Sequence[Row]) -> dict:
        """The image groups of these rows by content key."""
        return {k: g for r in rows for k, g in self.keyed_groups(r)}

    def prepare(self, row: Row) -> PreparedRow:
        """Template, image inputs and token ids of a row (each part cached by content)."""
        text, _ = self.templates.lookup((user_text(row), len(row.images)), lambda: self.adapter.prompt_text(row))
        keyed = self.keyed_groups(row)
        keys, groups = tuple(k for k, _ in keyed), [g for _, g in keyed]
        (prompt, shared), hit = self.prompts.lookup((text, keys), lambda: self._prompt(text, keys, groups))
        self.stats["prompt_cache_hits"] += int(hit)
        options = tuple(tuple(self._ids(self.adapter.answer_text(o, text), answer=True)) for o in row.shown_options)
        prefix = (keys, prompt.ids[:shared]) if shared else None
        return PreparedRow(row.row_id, prompt, keys, options, shared, prefix)

    def encode(self, row: Row) -> EncodedRow:
        """The row's prompt ids, pixels and option ids as one model call takes them (used by the training recipe)."""
        import torch

        prepared = self.prepare(row)
        tensors = [self.pixels.get(k) or self.adapter.process_group(g) for k, g in self.keyed_groups(row)]
        pixels = [t["pixel_values"][0] for t, _ in tensors]
        masks = [t["pixel_attention_mask"][0] for t, _ in tensors if "pixel_attention_mask" in t]
        return EncodedRow(list(prepared.prompt.ids), torch.cat(pixels) if pixels else None,
                          torch.cat(masks) if masks else None, [list(o) for o in prepared.options])

    # -- preprocessing ahead --------------------------------------------------------------------

    def start_prefetch(self, rows: Sequence[Row], mode: str) -> None:
        """Start preprocessing on the thread pool the large image groups of these rows that their turn will
        preprocess: neither in the pixel cache nor under way, and lacking a prompt layout or features.
        ``entry`` takes the result in row order, so the caches and counters are as without it."""
        if self.prefetch is False:
            return
        for row in rows:
            for key, group in self.keyed_groups(row):  # the digests read the pixels here, before a thread does
                if self.prefetch is None and self.last_output_bytes < PREFETCH_MIN_OUTPUT_BYTES and sum(
                        im.size[0] * im.size[1] for im in group) < PREFETCH_MIN_PIXELS:
                    continue
                if key in self.pending or key in self.pixels or (
                        key in self.layouts and (key, mode) in self.feature_store):
                    continue
                self.pending[key] = _preprocess_pool().submit(self.adapter.process_group, group)

    def cancel_prefetch(self) -> None:
        """Drop the preprocessing started ahead that no row took."""
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()

    # -- vision features ------------------------------------------------------------------------

    def features(self, prepared: Sequence[PreparedRow], images: dict, path: str, held: dict | None = None) -> dict:
        """Features of every image group of these rows on the device, encoding only what neither ``held`` (the
        features of the caller's current work: a window, one image's questions) nor the store holds; what
        is encoded is added to both."""
        import torch

        mode = self.precision.mode(path)
        held = {} if held is None else held
        out, missing = {}, []
        for key in dict.fromkeys(k for p in prepared for k in p.groups):
            cached = held.get(key)
            if cached is None:
                cached = self.feature_store.get((key, mode))
            if cached is not None:
                out[key] = held[key] = cached
                self.stats["feature_cache_hits"] += 1
            else:
                missing.append(key)
        buckets: dict[tuple, list] = {}
        for key in missing:
            tensors, _ = self.entry(key, images[key])
            signature = tuple((name, tuple(t.shape[1:]), str(t.dtype)) for name, t in sorted(tensors.items()))
            buckets.setdefault(signature, []).append((key, tensors))
        for bucket in buckets.values():
            for chunk in vision_chunks(bucket, self.vision_batch_size, self.vision_batch_values):
                inputs = {name: torch.cat([t[name] for _, t in chunk]).to(self.device) for name in chunk[0][1]}
                with self.precision.no_grad(), self.precision.autocast(path):
                    feats = self.adapter.image_features(inputs, [len(k) for k, _ in chunk])
                self.stats["vision_forwards"] += 1
                for (key, _), f in zip(chunk, feats):
                    self.stats["vision_encodes"] += len(key)
                    out[key] = held[key] = f
                    self.feature_store.put((key, mode), f)
        return out

    def row_features(self, prepared: Sequence[PreparedRow], rows: Sequence[Row], path: str,
                     held: dict | None = None) -> dict:
        """``features`` of these prepared rows, their images found in ``rows``."""
        return self.features(prepared, self.by_key(rows), path, held)
