"""Scorer for Hugging Face image-text-to-text models: one pass per row, one vision encode per distinct image.

An option's logit is log p(answer text | prompt) summed over the answer's tokens. Per-architecture
knowledge (template, image inputs, positions, masks, head) lives in ``scoring.adapters``; this
module runs the paths:

- **batch** (``score_batch``): all k options of a row in one sequence with block option attention
  (``scoring.layout``), ``batch_size`` rows per forward in length-sorted buckets; bf16 autocast on
  CUDA with precision ``auto``, fp32 on CPU.
- **predict** (``score_predict``): fp32; each row's prompt runs once, then its multi-token options
  run as one batch against the repeated prefix cache (``use_cache=True``), or every option runs
  as its own prompt + option sequence (``use_cache=False``).
- **per option** (``score_batch_per_option``): the batch path with one sequence per (row, option),
  the reference the one-pass batch path is held to.
- **shared prefixes** (batch and predict with the cache): a row's prompt through its last image token
  (``scoring.prefixes``) runs once per content and precision, in a forward over prefixes alone (on the
  batch path the prefixes a window's buckets lack run ahead, as many a forward as a bucket of its
  longest rows has tokens: ``prefixes.WindowPrefixes``, so new images cost their bucket about one
  forward, not two); its keys and values are kept (a segmented LRU bounded by bytes,
  ``cache.DEFAULT_PREFIX_CACHE_BYTES``) and every row that shares it, in this call or a later one,
  runs only its own tokens against them. A row with
  a shareable prefix is always scored this way, so its logits do not depend on what the store held.
  ``score_batch_unshared`` runs every row's whole prompt (the reference the shared path is held to);
  architectures whose prompt attends bidirectionally (PaliGemma) share nothing, as the identity says.

Images are preprocessed once per content (sha256 of mode, size and pixels) and encoded once per
content and precision; both stores are bounded by bytes (``cache.DEFAULT_*_CACHE_BYTES``), the
features' a segmented LRU that an image family's many new variants do not flush.
A batch-path call is scored in windows whose pixels fit half the pixel cache, and an image's prompt
layout outlives its pixels, so large images are not preprocessed again when the cache is full;
large images are preprocessed a few rows ahead on a thread pool.
Templated prompts and tokenized texts are cached per text. ``stats`` counts rows, forwards,
vision encodes, preprocessed image groups, cache hits, the language-model tokens computed
(``tokens``) and those a scorer running each row's whole prompt and options would compute
(``tokens_alone``), prefixes computed and rows that found theirs stored (``prefix_hits``).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from laya_robustness.rows import Row, image_digest
from laya_robustness.scoring import layout, prefixes
from laya_robustness.scoring.base import ModelLoadError, ScoringError, batch_precision, to_label_order
from laya_robustness.scoring.cache import (
    DEFAULT_FEATURE_CACHE_BYTES,
    DEFAULT_PIXEL_CACHE_BYTES,
    DEFAULT_PREFIX_CACHE_BYTES,
    ByteLRU,
    SegmentedLRU,
    tensor_bytes,
)
from laya_robustness.scoring.loading import (
    load_model,
    load_processor,
    resolve_checkpoint,
    supported_adapter,
    weight_hashes,
)
from laya_robustness.scoring.prompt import user_text

PRECISIONS = ("auto", "fp32", "bf16")
TEXT_CACHE_ENTRIES = 1 << 16
#: Bound of the per-image prompt layouts (placeholder text, grid sizes): about 7 KB for a 13-tile SmolVLM photo.
LAYOUT_CACHE_BYTES = 256 << 20
#: Image groups are preprocessed ahead of the rows that need them on this many threads, at most this many rows
#: ahead, when the work is large: a group of at least PREFETCH_MIN_PIXELS input pixels, or a processor whose last
#: output was at least PREFETCH_MIN_OUTPUT_BYTES. Resizing and normalising release the GIL on large arrays (2
#: threads on 2 cores: 1.65x for 512x384 inputs to 64 px, 3.2x for SmolVLM-256M's 13 tiles of 512 px) but not on
#: small ones, where a thread only contends (0.62x for 64x48 inputs to 64 px).
PREPROCESS_THREADS = min(8, os.cpu_count() or 1)
PREFETCH_ROWS = 2 * PREPROCESS_THREADS
PREFETCH_MIN_PIXELS = 512 * 384
PREFETCH_MIN_OUTPUT_BYTES = 1 << 20
#: Pixel values one vision forward takes at most (as many as 16 RGB images of 512 px): the encoder's
#: activations grow with the tiles it sees together, and 16 groups of SmolVLM-256M photos (13-17 tiles of
#: 512 px each) would be 272 tiles at once; such groups are encoded one at a time instead.
VISION_BATCH_VALUES = 16 * 3 * 512 * 512
_PREPROCESS_POOL: list[ThreadPoolExecutor] = []
STAT_KEYS = ("rows", "forwards", "sequences", "tokens", "tokens_alone", "prefixes", "prefix_hits", "vision_encodes",
             "vision_forwards", "feature_cache_hits", "image_preprocess", "pixel_cache_hits", "prompt_cache_hits")

__all__ = ["HFVLMScorer", "ModelLoadError", "PreparedRow", "EncodedRow", "weight_hashes"]


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


class HFVLMScorer:
    """Scores rows with a generative VLM: an option's logit is the log-likelihood of its answer text."""

    def __init__(self, model, processor, *, device: str = "cpu", precision: str = "auto", batch_size: int = 16,
                 identity: dict | None = None, feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                 pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES, vision_batch_size: int | None = None,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.processor = model.eval(), processor
        self.adapter = supported_adapter(model.config)(self.model, processor)
        self.tokenizer = processor.tokenizer
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self.vision_batch_size = vision_batch_size or batch_size
        self.vision_batch_values = VISION_BATCH_VALUES
        self._cache_bytes = (feature_cache_bytes, pixel_cache_bytes, prefix_cache_bytes)
        self.identity = {**(identity or {}), **self.adapter.identity(), "prefix_sharing": self._prefix_sharing()}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.eos_token = self.adapter.end_of_answer()
        #: Preprocess ahead on the thread pool: None decides per group by its size (see PREFETCH_MIN_PIXELS).
        self.prefetch: bool | None = None
        self._last_output_bytes = 0
        self._reset_caches()

    def _reset_caches(self) -> None:
        self.stats = {k: 0 for k in STAT_KEYS}
        # Keyed by an image group (its images' content keys), (group, mode) and (mode, (groups, token ids)).
        self._feature_store = SegmentedLRU(self._cache_bytes[0], digests_of=lambda key: key[0])
        self._pixels = ByteLRU(self._cache_bytes[1], digests_of=lambda group: group)
        self._prefixes = SegmentedLRU(self._cache_bytes[2],  # -> prefixes.PrefixKV
                                      digests_of=lambda key: {d for group in key[1][0] for d in group})
        self._layouts = ByteLRU(LAYOUT_CACHE_BYTES, digests_of=lambda group: group)
        self._pending: dict = {}  # image key -> future of its preprocessing, submitted ahead of its row
        self._templates, self._token_ids, self._prompts = _TextCache(), _TextCache(), _PromptCache()

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str = "cpu", precision: str = "auto",
                        batch_size: int = 16, attn_implementation: str = "eager",
                        trust_remote_code: bool = False, feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                        pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES,
                        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> "HFVLMScorer":
        """Load a local directory or a hub id (local cache first) through the adapter of its architecture."""
        from transformers import AutoConfig

        local = resolve_checkpoint(str(name_or_path))
        source = str(local) if local is not None else str(name_or_path)
        try:
            config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        except Exception as exc:
            raise ModelLoadError(f"cannot load the config of model {name_or_path!r}: {exc}") from exc
        supported_adapter(config)  # UnsupportedArchitecture before any weights are read
        try:
            processor = load_processor(source, trust_remote_code)
            model = load_model(source, attn_implementation, trust_remote_code)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"cannot load model {name_or_path!r}: {type(exc).__name__}: {exc}") from exc
        identity = {"model": str(name_or_path), "weights_sha256": weight_hashes(local) if local else {},
                    "attn_implementation": attn_implementation}
        return cls(model.to(device), processor, device=device, precision=precision, batch_size=batch_size,
                   identity=identity, feature_cache_bytes=feature_cache_bytes, pixel_cache_bytes=pixel_cache_bytes,
                   prefix_cache_bytes=prefix_cache_bytes)

    def replaced(self, *, model=None, precision: str | None = None,
                 prefix_cache_bytes: int | None = None) -> "HFVLMScorer":
        """A scorer like this one with another model (e.g. bf16 weights), precision or prefix store bound (0: no
        prefix sharing), and empty caches."""
        other = copy.copy(self)
        if prefix_cache_bytes is not None:
            other._cache_bytes = (*self._cache_bytes[:2], prefix_cache_bytes)
            other.identity = {**self.identity, "prefix_sharing": other._prefix_sharing()}
        if model is not None:
            other.model = model.eval()
        other.adapter = type(self.adapter)(other.model, self.processor)  # its own, never shared
        if precision is not None:
            if precision not in PRECISIONS:
                raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
            other.precision = precision
        other._reset_caches()
        return other

    def _prefix_sharing(self) -> str:
        """The identity's ``prefix_sharing``: the adapter's way, or none without a prefix store."""
        if not self._cache_bytes[2]:
            return "none: no prefix store (prefix_cache_bytes 0); each row runs its whole prompt"
        return self.adapter.prefix_sharing()

    @property
    def shares_prefixes(self) -> bool:
        """Whether rows about the same images run their shared prompt prefix once (see the module doc)."""
        return bool(self._cache_bytes[2]) and not self.adapter.bidirectional_prompt

    def forget_images(self, digests) -> None:
        """Let go of everything kept of these images (content keys): their pixels, prompt layouts, prompts, vision
        features and prompt prefixes. The run calls it with the variant images whose last row is done, which
        no later row asks for (``run.variants.VariantImages``); asked for again, an image is prepared, encoded
        and run anew."""
        gone = set(digests)
        for store in (self._pixels, self._layouts, self._feature_store, self._prefixes, self._prompts):
            store.forget(gone)

    # -- precision ------------------------------------------------------------------------------

    def batch_precision(self) -> str:
        """``bf16`` when the batch path runs under bf16 autocast (CUDA with ``auto``, or ``bf16``), else ``fp32``."""
        return batch_precision(self.precision, self.device)

    def _mode(self, path: str) -> str:
        """The precision a path runs in: the feature cache keeps each image once per mode."""
        dtype = str(next(self.model.parameters()).dtype).replace("torch.", "")
        autocast = self.batch_precision() if path == "batch" else "fp32"
        return f"{dtype}/{autocast}"

    def _autocast(self, path: str):
        import torch

        if path == "batch" and self.batch_precision() == "bf16":
            device_type = "cuda" if str(self.device).startswith("cuda") else "cpu"
            return torch.autocast(device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # -- preparing rows -------------------------------------------------------------------------

    def _image_entry(self, key: tuple[str, ...], images: tuple) -> tuple[dict, list[str]]:
        entry = self._pixels.get(key)
        if entry is not None:
            self.stats["pixel_cache_hits"] += 1
            return entry
        pending = self._pending.pop(key, None)
        entry = pending.result() if pending is not None else self.adapter.process_group(images)
        self.stats["image_preprocess"] += 1
        self._last_output_bytes = tensor_bytes(entry[0])
        self._pixels.put(key, entry, self._last_output_bytes)
        return entry

    def _image_layout(self, key: tuple[str, ...], images: tuple) -> tuple[dict, list[str]]:
        """What a prompt needs of an image group (its placeholder text and ``layout_inputs``), kept after its
        pixels leave the pixel cache, so a new question on a known image does not preprocess it again."""
        layout_entry = self._layouts.get(key)
        if layout_entry is None:
            tensors, replacements = self._image_entry(key, images)
            layout_entry = ({name: tensors[name] for name in self.adapter.layout_inputs}, replacements)
            self._layouts.put(key, layout_entry, tensor_bytes(layout_entry[0]) + sum(map(len, replacements)))
        return layout_entry

    def _ids(self, text: str, answer: bool = False) -> list[int]:
        ids, _ = self._token_ids.lookup((answer, text), lambda: (
            self.adapter.tokenize_answer(text) if answer else self.adapter.tokenize_prompt(text)))
        return ids

    def _prompt(self, text: str, keys: tuple, groups: list[tuple]) -> tuple[layout.Prompt, int]:
        """The prompt of a templated text with these image groups (expanded, tokenized, positioned) and the
        length of its shareable prefix."""
        entries = [self._image_layout(k, g) for k, g in zip(keys, groups)]
        ids = self._ids(self.adapter.expand(text, [r for _, reps in entries for r in reps]))
        blocks = self.adapter.prompt_blocks(ids)
        prompt = layout.Prompt(tuple(ids), self.adapter.prompt_positions(ids, [t for t, _ in entries]), blocks)
        return prompt, self.adapter.prefix_length(ids, blocks)

    def _keyed_groups(self, row: Row) -> list[tuple[tuple[str, ...], tuple]]:
        """(content key, images) of each image group of a row, as the adapter groups them."""
        return [(tuple(image_digest(im) for im in g), g) for g in self.adapter.image_groups(row.images)]

    def prepare(self, row: Row) -> PreparedRow:
        """Template, image inputs and token ids of a row (each part cached by content)."""
        text, _ = self._templates.lookup((user_text(row), len(row.images)), lambda: self.adapter.prompt_text(row))
        keyed = self._keyed_groups(row)
        keys, groups = tuple(k for k, _ in keyed), [g for _, g in keyed]
        (prompt, shared), hit = self._prompts.lookup((text, keys), lambda: self._prompt(text, keys, groups))
        self.stats["prompt_cache_hits"] += int(hit)
        options = tuple(tuple(self._ids(self.adapter.answer_text(o, text), answer=True)) for o in row.shown_options)
        prefix = (keys, prompt.ids[:shared]) if shared else None
        return PreparedRow(row.row_id, prompt, keys, options, shared, prefix)

    def encode(self, row: Row) -> EncodedRow:
        """The row's prompt ids, pixels and option ids as one model call takes them (used by the training recipe)."""
        import torch

        prepared = self.prepare(row)
        tensors = [self._pixels.get(k) or self.adapter.process_group(g) for k, g in self._keyed_groups(row)]
        pixels = [t["pixel_values"][0] for t, _ in tensors]
        masks = [t["pixel_attention_mask"][0] for t, _ in tensors if "pixel_attention_mask" in t]
        return EncodedRow(list(prepared.prompt.ids), torch.cat(pixels) if pixels else None,
                          torch.cat(masks) if masks else None, [list(o) for o in prepared.options])

    # -- vision features ------------------------------------------------------------------------

    def _features(self, prepared: Sequence[PreparedRow], images: dict, path: str, held: dict | None = None) -> dict:
        """Features of every image group of these rows on the device, encoding only what neither ``held`` (the
        features of the caller's current work: a window, one image's questions) nor the store holds; what
        is encoded is added to both."""
        import torch

        mode = self._mode(path)
        held = {} if held is None else held
        out, missing = {}, []
        for key in dict.fromkeys(k for p in prepared for k in p.groups):
            cached = held.get(key)
            if cached is None:
                cached = self._feature_store.get((key, mode))
            if cached is not None:
                out[key] = held[key] = cached
                self.stats["feature_cache_hits"] += 1
            else:
                missing.append(key)
        buckets: dict[tuple, list] = {}
        for key in missing:
            tensors, _ = self._image_entry(key, images[key])
            signature = tuple((name, tuple(t.shape[1:]), str(t.dtype)) for name, t in sorted(tensors.items()))
            buckets.setdefault(signature, []).append((key, tensors))
        for bucket in buckets.values():
            for chunk in vision_chunks(bucket, self.vision_batch_size, self.vision_batch_values):
                inputs = {name: torch.cat([t[name] for _, t in chunk]).to(self.device) for name in chunk[0][1]}
                with torch.inference_mode(), self._autocast(path):
                    feats = self.adapter.image_features(inputs, [len(k) for k, _ in chunk])
                self.stats["vision_forwards"] += 1
                for (key, _), f in zip(chunk, feats):
                    self.stats["vision_encodes"] += len(key)
                    out[key] = held[key] = f
                    self._feature_store.put((key, mode), f)
        return out

    def _images_by_key(self, rows: Sequence[Row]) -> dict:
        return {k: g for r in rows for k, g in self._keyed_groups(r)}

    # -- the language model ---------------------------------------------------------------------

    def _masks(self, batch: layout.Batch, dtype, query_start: int = 0):
        full = layout.additive_mask(layout.allowed(batch, query_start, device=self.device), dtype)
        window = self.adapter.sliding_window()
        if window is None:
            return full
        sliding = layout.additive_mask(layout.allowed(batch, query_start, window, self.device), dtype)
        return {"full_attention": full, "sliding_attention": sliding}

    def _embed(self, batch: layout.Batch, seqs: Sequence[PreparedRow], features: dict):
        """Token embeddings with each row's image features placed at its image tokens."""
        import torch

        embeds = self.adapter.embed(torch.from_numpy(batch.ids).to(self.device))
        image = batch.ids == self.adapter.image_token_id
        for b, prepared in enumerate(seqs):
            if not prepared.groups or not image[b].any():
                continue
            feats = torch.cat([features[k] for k in prepared.groups], dim=0)
            where = torch.from_numpy(np.nonzero(image[b])[0]).to(self.device)
            if len(where) != feats.shape[0]:
                raise ValueError(f"row {prepared.row_id}: {len(where)} image tokens but {feats.shape[0]} image "
                                 f"feature vectors")
            embeds[b, where] = feats.to(embeds.dtype)
        return embeds

    def _run(self, batch: layout.Batch, embeds, query_start: int = 0, cache=None, **kwargs):
        """One language-model forward of the batch's queries (from ``query_start``); hidden states and cache."""
        import torch

        positions = torch.from_numpy(batch.positions[:, :, query_start:]).to(self.device)
        if positions.shape[0] == 1:
            positions = positions[0]
        masks = self._masks(batch, embeds.dtype, query_start)
        self.stats["forwards"] += 1
        self.stats["sequences"] += batch.ids.shape[0]
        self.stats["tokens"] += int(batch.valid[:, query_start:].sum())
        return self.adapter.language_model(inputs_embeds=embeds, attention_mask=masks, position_ids=positions,
                                           cache=cache, use_cache=cache is not None, **kwargs)

    def _log_likelihoods(self, hidden, targets: list[list[list[tuple[int, int]]]]) -> list[list[float]]:
        """Sum of log p(token) per option; ``targets[b][j]`` lists (position, token) in sequence b.

        The head runs once per distinct position (the last prompt token is shared by all options).
        """
        import torch

        where: dict[tuple[int, int], int] = {}
        picks, tokens, owner = [], [], []
        n_options = 0
        for b, seq in enumerate(targets):
            for option in seq:
                for s, t in option:
                    picks.append(where.setdefault((b, s), len(where)))
                    tokens.append(t)
                    owner.append(n_options)
                n_options += 1
        device = hidden.device
        positions = torch.tensor(list(where), device=device)
        logp = torch.log_softmax(self.adapter.head(hidden[positions[:, 0], positions[:, 1]]).float(), dim=-1)
        values = logp[torch.tensor(picks, device=device), torch.tensor(tokens, device=device)]
        sums = torch.zeros(n_options, dtype=values.dtype, device=device).index_add_(
            0, torch.tensor(owner, device=device), values).tolist()
        out, k = [], 0
        for seq in targets:
            out.append(sums[k:k + len(seq)])
            k += len(seq)
        return out

    def _score_sequences(self, items: Sequence[tuple[PreparedRow, tuple[int, ...]]], features: dict,
                         path: str) -> list[list[float]]:
        """One forward over sequences ``prompt | options[j][:-1] for j in item``: log-likelihood per option."""
        import torch

        seqs = [layout.pack(p.prompt, [list(p.options[j]) for j in js]) for p, js in items]
        batch = layout.collate(seqs, self.pad_id)
        with torch.inference_mode(), self._autocast(path):
            embeds = self._embed(batch, [p for p, _ in items], features)
            hidden = self._run(batch, embeds).last_hidden_state
            return self._log_likelihoods(hidden, [s.targets for s in seqs])

    # -- batch path -----------------------------------------------------------------------------

    def _guarded(self, rows: Sequence[Row], work):
        try:
            return work()
        except ScoringError:
            raise
        except Exception as exc:
            raise ScoringError(self.identity.get("model", type(self.model).__name__),
                               [r.row_id for r in rows], exc) from exc

    @staticmethod
    def _buckets(prepared: Sequence[PreparedRow], rows_per_forward: int, share: bool = False) -> list[list[int]]:
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

    def _windows(self, rows: Sequence[Row], path: str, share: bool) -> Iterator[list[tuple[int, PreparedRow]]]:
        """(index, prepared row) in row order, in windows whose pixels still to encode fit half the pixel cache
        (a row scored against a stored prefix, with ``share``, needs none).

        The caller scores a window before the next is prepared, so the pixels a window preprocessed are
        still cached when its buckets encode them: an image is preprocessed once per call, not again when
        a call's pixels outgrow the cache (a SmolVLM photo of 13 tiles is 65 MiB of pixels and mask; a
        batch-path chunk is 256 rows). Where the pixels fit, or no pixel cache is kept, the call is one window.
        """
        mode, budget = self._mode(path), self._pixels.max_bytes // 2
        window: list[tuple[int, PreparedRow]] = []
        held, counted = 0, set()
        try:
            for i, row in enumerate(rows):
                self._prefetch(rows[i + PREFETCH_ROWS - 1:i + PREFETCH_ROWS] if i else rows[:PREFETCH_ROWS], mode)
                prepared = self._guarded([row], lambda row=row: self.prepare(row))
                keys: dict = {}
                for key, group in ([] if share and self._prefix_stored(prepared, mode) else self._keyed_groups(row)):
                    if budget and key not in counted and key not in keys and (key, mode) not in self._feature_store:
                        size = self._pixels.touch(key)
                        if size is None:
                            size = tensor_bytes(self._guarded([row], lambda: self._image_entry(key, group))[0])
                        keys[key] = size
                need = sum(keys.values())
                if window and held + need > budget:
                    yield window
                    window, held, counted = [], 0, set()
                    for key in keys:  # scoring the window touched its own pixels: make this row's the newest again
                        self._pixels.touch(key)
                window.append((i, prepared))
                held += need
                counted.update(keys)
            if window:
                yield window
        finally:
            for future in self._pending.values():
                future.cancel()
            self._pending.clear()

    def _prefetch(self, rows: Sequence[Row], mode: str) -> None:
        """Start preprocessing on the thread pool the large image groups of these rows that their turn will
        preprocess: neither in the pixel cache nor under way, and lacking a prompt layout or features.
        ``_image_entry`` takes the result in row order, so the caches and counters are as without it."""
        if self.prefetch is False:
            return
        for row in rows:
            for key, group in self._keyed_groups(row):  # the digests read the pixels here, before a thread does
                if self.prefetch is None and self._last_output_bytes < PREFETCH_MIN_OUTPUT_BYTES and sum(
                        im.size[0] * im.size[1] for im in group) < PREFETCH_MIN_PIXELS:
                    continue
                if key in self._pending or key in self._pixels or (
                        key in self._layouts and (key, mode) in self._feature_store):
                    continue
                self._pending[key] = _preprocess_pool().submit(self.adapter.process_group, group)

    def _window_buckets(self, rows: Sequence[Row], path: str, share: bool):
        """(buckets, the window's held features) of each window of ``_windows``: the window cut into length-sorted
        buckets of ``batch_size`` rows, each bucket (row indices, rows, prepared rows)."""
        for window in self._windows(rows, path, share):
            prepared = [p for _, p in window]
            yield [([window[i][0] for i in chunk], [rows[window[i][0]] for i in chunk], [prepared[i] for i in chunk])
                   for chunk in self._buckets(prepared, self.batch_size, share)], {}

    def _forward_chunks(self, rows: Sequence[Row], path: str):
        """(row indices, rows, prepared rows, the window's held features) of each forward over whole prompts."""
        for buckets, held in self._window_buckets(rows, path, share=False):
            for indices, chunk_rows, chunk_prepared in buckets:
                yield indices, chunk_rows, chunk_prepared, held

    def _score_rows(self, rows: Sequence[Row], one_pass: bool, share: bool) -> list[np.ndarray]:
        shown: list = [None] * len(rows)
        share = share and one_pass and self.shares_prefixes
        for buckets, held in self._window_buckets(rows, "batch", share):
            plan = self._window_prefixes(buckets) if share else None
            for j, (indices, chunk_rows, chunk_prepared) in enumerate(buckets):

                def work(j=j, chunk_rows=chunk_rows, chunk_prepared=chunk_prepared):
                    if one_pass:
                        return self._score_one_pass(chunk_rows, chunk_prepared, held, plan and (plan, j, buckets))
                    features = self._features(chunk_prepared, self._images_by_key(chunk_rows), "batch", held)
                    items = [(p, (j,)) for p in chunk_prepared for j in range(len(p.options))]
                    flat = self._score_sequences(items, features, "batch")
                    out, k = [], 0
                    for p in chunk_prepared:
                        out.append([s[0] for s in flat[k:k + len(p.options)]])
                        k += len(p.options)
                    return out

                for i, scores in zip(indices, self._guarded(chunk_rows, work)):
                    shown[i] = scores
                self.stats["tokens_alone"] += sum(p.alone_tokens for p in chunk_prepared)
                if plan:
                    plan.done(j)
        self.stats["rows"] += len(rows)
        return [to_label_order(r, s) for r, s in zip(rows, shown)]

    def _window_prefixes(self, buckets) -> prefixes.WindowPrefixes:
        """The window's prefix plan: a forward over prefixes alone holds no more tokens than a bucket of the
        window's longest rows."""
        longest = max(p.alone_tokens for _, _, chunk in buckets for p in chunk)
        return prefixes.WindowPrefixes([[(p.prefix, p.prefix_length) for p in chunk if p.prefix]
                                        for _, _, chunk in buckets], self.batch_size * longest)

    def _score_one_pass(self, rows: Sequence[Row], prepared: Sequence[PreparedRow], held: dict,
                        planned=None) -> list[list[float]]:
        """All options of each row in one sequence: rows with a shareable prefix against its keys and values
        (with ``planned``, the window's prefix plan, this bucket's index and the window's buckets), the others
        over their whole prompt."""
        out: list = [None] * len(rows)
        shared = [i for i, p in enumerate(prepared) if planned and p.prefix]
        whole = sorted(set(range(len(rows))) - set(shared))
        if whole:
            items = [(prepared[i], tuple(range(len(prepared[i].options)))) for i in whole]
            features = self._features([p for p, _ in items], self._images_by_key([rows[i] for i in whole]), "batch",
                                      held)
            for i, scores in zip(whole, self._score_sequences(items, features, "batch")):
                out[i] = scores
        if shared:
            items = [(prepared[i], tuple(range(len(prepared[i].options)))) for i in shared]
            kvs = self._planned_prefix_kvs([p for p, _ in items], held, *planned)
            for i, scores in zip(shared, self._score_after_prefixes(items, kvs, "batch")):
                out[i] = scores
        return out

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Logits (label order) of every row: all options of a row in one sequence, ``batch_size`` rows a forward,
        each shareable prompt prefix run once."""
        return self._score_rows(rows, one_pass=True, share=True)

    def score_batch_unshared(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path with every row's whole prompt in its forward: the reference of the shared prefixes."""
        return self._score_rows(rows, one_pass=True, share=False)

    def score_batch_per_option(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path with one sequence per (row, option), each over the whole prompt: the reference of the
        one-pass batch path."""
        return self._score_rows(rows, one_pass=False, share=False)

    # -- shared prefixes ------------------------------------------------------------------------

    def _prefix_stored(self, prepared: PreparedRow, mode: str) -> bool:
        """Whether the store holds the row's prefix (on a path that shares prefixes, the row then needs no image
        inputs)."""
        return bool(prepared.prefix) and (mode, prepared.prefix) in self._prefixes

    def _prefix_kvs(self, prepared: Sequence[PreparedRow], rows: Sequence[Row], path: str,
                    held: dict | None) -> list[prefixes.PrefixKV]:
        """Each row's prefix keys and values: from the store, or run now, each distinct prefix once and all of
        them in one forward over the prefixes alone (then kept in the store)."""
        mode = self._mode(path)
        found: dict = {}
        for p in prepared:
            kv = found.get(p.prefix) or self._prefixes.get((mode, p.prefix))
            if kv is not None:
                found[p.prefix] = kv
                self.stats["prefix_hits"] += 1
        missing = {p.prefix: (p, row) for p, row in zip(prepared, rows) if p.prefix not in found}
        if missing:
            found.update(self._run_prefixes(list(missing.values()), path, held))
        return [found[p.prefix] for p in prepared]

    def _planned_prefix_kvs(self, prepared: Sequence[PreparedRow], held: dict, plan: prefixes.WindowPrefixes,
                            j: int, buckets) -> list[prefixes.PrefixKV]:
        """The prefix keys and values of bucket ``j``'s rows: held by the window's plan, or from the store; what
        the bucket lacks runs first, with what the buckets after it lack (``WindowPrefixes.to_run``)."""
        mode = self._mode("batch")
        for p in prepared:  # held from here on: the prefixes run next must not evict them from the store first
            if p.prefix not in plan.held and (kv := self._prefixes.get((mode, p.prefix))) is not None:
                plan.held[p.prefix] = kv
        wanted = plan.to_run(j, lambda key: (mode, key) in self._prefixes)
        if wanted:
            owners: dict = {}
            for _, chunk_rows, chunk in buckets[j:]:
                for p, r in zip(chunk, chunk_rows):
                    owners.setdefault(p.prefix, (p, r))
            run = [owners[key] for key in wanted]  # an error names the rows whose prefixes ran, later buckets' too
            plan.held.update(self._guarded([r for _, r in run], lambda: self._run_prefixes(run, "batch", held)))
        for p in prepared:
            self.stats["prefix_hits"] += plan.is_hit(p.prefix, j)
        return [plan.held[p.prefix] for p in prepared]

    def _run_prefixes(self, owners: Sequence[tuple[PreparedRow, Row]], path: str, held: dict | None) -> dict:
        """Distinct prefixes (each with a row that has it) run in one forward over the prefixes alone, each kept in
        the store: prefix key -> ``PrefixKV``."""
        import torch
        from transformers import DynamicCache

        mode = self._mode(path)
        new = [p for p, _ in owners]
        heads = [replace(p, prompt=layout.Prompt(
            p.prompt.ids[:p.prefix_length], p.prompt.positions[:, :p.prefix_length],
            p.prompt.blocks[:p.prefix_length])) for p in new]
        features = self._features(new, self._images_by_key([row for _, row in owners]), path, held)
        batch = layout.collate([layout.pack(h.prompt, []) for h in heads], self.pad_id)
        cache = DynamicCache()
        with torch.inference_mode(), self._autocast(path):
            self._run(batch, self._embed(batch, heads, features), cache=cache)
        out = {}
        for b, p in enumerate(new):
            out[p.prefix] = kv = prefixes.PrefixKV.from_cache(cache, b, p.prefix_length)
            self._prefixes.put((mode, p.prefix), kv, kv.nbytes)
        self.stats["prefixes"] += len(new)
        return out

    def _score_after_prefixes(self, items: Sequence[tuple[PreparedRow, tuple[int, ...]]],
                              kvs: Sequence[prefixes.PrefixKV], path: str) -> list[list[float]]:
        """One forward over the tokens after each row's prefix (``prompt[prefix:] | options[j][:-1] for j in
        item``) against the prefixes' keys and values: log-likelihood per option."""
        import torch

        seqs = [layout.pack(p.prompt, [list(p.options[j]) for j in js]) for p, js in items]
        lengths = [p.prefix_length for p, _ in items]
        batch = layout.collate(seqs, self.pad_id, prefix_lengths=lengths)
        start = max(lengths)
        ids = torch.from_numpy(batch.ids[:, start:]).to(self.device)
        if bool((ids == self.adapter.image_token_id).any()):
            raise ValueError("an image token after a shared prefix: the prefix must end after the last image token")
        with torch.inference_mode(), self._autocast(path):
            hidden = self._run(batch, self.adapter.embed(ids), query_start=start,
                               cache=prefixes.batch_cache(kvs)).last_hidden_state
            return self._log_likelihoods(hidden, [layout.after_prefix(s.targets, n) for s, n in zip(seqs, lengths)])

    # -- predict path ---------------------------------------------------------------------------

    def score_predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """fp32 logits (label order) of the given rows (one image's questions) in one call."""
        out, held = [], {}
        for row in rows:
            out.append(self._guarded([row], lambda row=row: to_label_order(row, self._predict_one(row, use_cache,
                                                                                                  held))))
        self.stats["rows"] += len(rows)
        return out

    def _predict_one(self, row: Row, use_cache: bool, held: dict | None = None) -> list[float]:
        import torch

        prepared = self.prepare(row)
        self.stats["tokens_alone"] += prepared.alone_tokens
        if not use_cache:
            features = self._features([prepared], self._images_by_key([row]), "predict", held)
            return [s[0] for s in self._score_sequences([(prepared, (j,)) for j in range(len(prepared.options))],
                                                         features, "predict")]
        n = len(prepared.prompt.ids)
        with torch.inference_mode():
            last_hidden, cache = self._prompt_cache(prepared, row, held)
            last = torch.log_softmax(self.adapter.head(last_hidden).float(), dim=-1)[0]
            scores = [float(last[o[0]]) for o in prepared.options]
            longer = [j for j, o in enumerate(prepared.options) if len(o) > 1]
            if longer:
                seqs = [layout.pack(prepared.prompt, [list(prepared.options[j])]) for j in longer]
                batch = layout.collate(seqs, self.pad_id)
                cache.batch_repeat_interleave(len(longer))
                embeds = self.adapter.embed(torch.from_numpy(batch.ids[:, n:]).to(self.device))
                cont = self._run(batch, embeds, query_start=n, cache=cache).last_hidden_state
                rest = self._log_likelihoods(cont, [[[(s - n, t) for s, t in seq.targets[0][1:]]] for seq in seqs])
                for j, (extra,) in zip(longer, rest):
                    scores[j] += extra
        return scores

    def _prompt_cache(self, prepared: PreparedRow, row: Row, held: dict | None):
        """The last prompt token's hidden state (1, hidden) and the prompt's ``DynamicCache``: the tokens after a
        shareable prefix run against its keys and values, any other prompt runs whole."""
        import torch
        from transformers import DynamicCache

        batch = layout.collate([layout.pack(prepared.prompt, [])], self.pad_id)
        if self.shares_prefixes and prepared.prefix:
            kv, = self._prefix_kvs([prepared], [row], "predict", held)
            cache, start = prefixes.batch_cache([kv]), kv.length
            embeds = self.adapter.embed(torch.from_numpy(batch.ids[:, start:]).to(self.device))
        else:
            features = self._features([prepared], self._images_by_key([row]), "predict", held)
            cache, start = DynamicCache(), 0
            embeds = self._embed(batch, [prepared], features)
        hidden = self._run(batch, embeds, query_start=start, cache=cache).last_hidden_state
        n = len(prepared.prompt.ids)
        return hidden[0, n - 1 - start:n - start], cache

    # -- optional capabilities ------------------------------------------------------------------

    @contextlib.contextmanager
    def _whole_prompts(self):
        """Count the tokens of the forwards inside in ``tokens_alone`` too: they run every prompt whole."""
        before = self.stats["tokens"]
        try:
            yield
        finally:
            self.stats["tokens_alone"] += self.stats["tokens"] - before

    def layer_states(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Per row, fp32 hidden states (n_layers + 1, hidden) at the last prompt position.

        Entry 0 is the embedding output (image features in place), entry i the output of decoder
        layer i; the last entry is after the model's final norm, as transformers reports it.
        """
        import torch

        out: list = [None] * len(rows)
        for indices, chunk_rows, chunk_prepared, held in self._forward_chunks(rows, "predict"):

            def work(chunk_rows=chunk_rows, chunk_prepared=chunk_prepared, held=held):
                features = self._features(chunk_prepared, self._images_by_key(chunk_rows), "predict",
                                          held)
                batch = layout.collate([layout.pack(p.prompt, []) for p in chunk_prepared], self.pad_id)
                with torch.inference_mode(), self._whole_prompts():
                    result = self._run(batch, self._embed(batch, chunk_prepared, features), output_hidden_states=True)
                states = torch.stack(result.hidden_states, dim=1)  # (B, n_layers + 1, S, hidden)
                return [states[b, :, len(p.prompt.ids) - 1].float().cpu().numpy()
                        for b, p in enumerate(chunk_prepared)]

            for i, state in zip(indices, self._guarded(chunk_rows, work)):
                out[i] = state
        return out

    def generate(self, rows: Sequence[Row], max_new_tokens: int = 16) -> list[str]:
        """Greedy answer text after each row's prompt (fp32, deterministic), without the end token."""
        with self._whole_prompts():
            return [self._guarded([r], lambda r=r: self._generate_one(r, max_new_tokens)) for r in rows]

    def _generate_one(self, row: Row, max_new_tokens: int) -> str:
        import torch
        from transformers import DynamicCache

        prepared = self.prepare(row)
        features = self._features([prepared], self._images_by_key([row]), "predict")
        stop = {self.tokenizer.convert_tokens_to_ids(self.eos_token), self.tokenizer.eos_token_id}
        prompt, tokens = prepared.prompt, []
        with torch.inference_mode():
            batch = layout.collate([layout.pack(prompt, [])], self.pad_id)
            cache = DynamicCache()
            hidden = self._run(batch, self._embed(batch, [prepared], features), cache=cache).last_hidden_state[0, -1:]
            for _ in range(max_new_tokens):
                token = int(self.adapter.head(hidden).float().argmax(-1)[0])
                if token in stop:
                    break
                tokens.append(token)
                seq = layout.pack(prompt, [tokens + [0]])  # fed: prompt | tokens (the last entry is never fed)
                batch = layout.collate([seq], self.pad_id)
                start = len(prompt.ids) + len(tokens) - 1
                embeds = self.adapter.embed(torch.tensor([[token]], device=self.device))
                hidden = self._run(batch, embeds, query_start=start, cache=cache).last_hidden_state[0, -1:]
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


def _resolve_local_dir(name_or_path: str) -> Path | None:
    """The checkpoint's local directory, or None when there is none (the dual-encoder scorer's hashes use it)."""
    try:
        return resolve_checkpoint(str(name_or_path))
    except ModelLoadError:
        return None

