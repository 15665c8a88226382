"""Scorer for Hugging Face image-text-to-text models: one pass per row, one vision encode per distinct image.

An option's logit is log p(answer text | prompt) summed over the answer's tokens. Per-architecture
knowledge (template, image inputs, positions, masks, head) lives in ``scoring.adapters``; ``HFVLMScorer`` loads a
checkpoint (``from_pretrained``) or takes a model in memory (``from_model``) and wires its parts: the inputs and
their caches (``hf_images``), the batch plan (``hf_planning``), the forward (``hf_forward``), the shared prefixes
(``hf_prefix_runs``) and the strategies over rows (``hf_strategies``: batch, per option, predict):

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

Every public scoring call runs the model in eval mode and puts back the mode each of its modules had (also when
the call raises); a model scored in memory runs under ``no_grad`` instead of inference mode, so its weights stay
trainable.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring.base import ModelLoadError, batch_precision, guarded
from laya_robustness.scoring.cache import (
    DEFAULT_FEATURE_CACHE_BYTES,
    DEFAULT_PIXEL_CACHE_BYTES,
    DEFAULT_PREFIX_CACHE_BYTES,
)
from laya_robustness.scoring.hf_forward import PRECISIONS, Forward, Precision, check_precision
# PreparedRow, EncodedRow, _PromptCache, pixel_values and vision_chunks are imported from here too
from laya_robustness.scoring.hf_images import (
    EncodedRow,
    ImageInputs,
    PreparedRow,
    _PromptCache,
    pixel_values,
    vision_chunks,
)
from laya_robustness.scoring.hf_strategies import Paths
from laya_robustness.scoring.hf_planning import Planner, buckets
from laya_robustness.scoring.hf_prefix_runs import PrefixRuns
from laya_robustness.scoring.in_memory import adapters, unwrapped
from laya_robustness.scoring.loading import load_model, load_processor, resolve_checkpoint, supported_adapter
from laya_robustness.weights import model_weight_hashes, weight_hashes

STAT_KEYS = ("rows", "forwards", "sequences", "tokens", "tokens_alone", "prefixes", "prefix_hits", "vision_encodes",
             "vision_forwards", "feature_cache_hits", "image_preprocess", "pixel_cache_hits", "prompt_cache_hits")
#: What ``HFVLMScorer.from_model`` records as the model's name when its config names no checkpoint.
IN_MEMORY = "in-memory"

__all__ = ["HFVLMScorer", "ModelLoadError", "PreparedRow", "EncodedRow", "PRECISIONS", "pixel_values",
           "vision_chunks"]


class _Part:
    """An attribute of one of the scorer's parts, read and set through the scorer (``scorer.prefetch = True``)."""

    def __init__(self, part: str, name: str):
        self.part, self.name = part, name

    def __get__(self, scorer, owner=None):
        return self if scorer is None else getattr(getattr(scorer, self.part), self.name)

    def __set__(self, scorer, value) -> None:
        setattr(getattr(scorer, self.part), self.name, value)


class HFVLMScorer:
    """Scores rows with a generative VLM: an option's logit is the log-likelihood of its answer text."""

    #: Preprocess ahead on the thread pool: None decides per group by its size (``hf_images.PREFETCH_MIN_PIXELS``).
    prefetch = _Part("_images", "prefetch")
    vision_batch_size = _Part("_images", "vision_batch_size")
    vision_batch_values = _Part("_images", "vision_batch_values")
    _pixels, _layouts = _Part("_images", "pixels"), _Part("_images", "layouts")
    _feature_store, _prompts = _Part("_images", "feature_store"), _Part("_images", "prompts")
    _pending, _prefixes = _Part("_images", "pending"), _Part("_prefix_runs", "store")
    _buckets = staticmethod(buckets)

    def __init__(self, model, processor, *, device: str = "cpu", precision: str = "auto", batch_size: int = 16,
                 identity: dict | None = None, feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                 pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES, vision_batch_size: int | None = None,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, in_memory: bool = False):
        check_precision(precision)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        #: A model scored as it stands (``from_model``): its mode is left as found, autograd off by ``no_grad``.
        self.in_memory = in_memory
        self.model, self.processor = model if in_memory else model.eval(), processor
        self.adapter = supported_adapter(model.config)(self.model, processor)
        self.tokenizer = processor.tokenizer
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self._cache_bytes = (feature_cache_bytes, pixel_cache_bytes, prefix_cache_bytes)
        self.identity = {**(identity or {}), **self.adapter.identity(), "prefix_sharing": self._prefix_sharing()}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.eos_token = self.adapter.end_of_answer()
        self.stats = {k: 0 for k in STAT_KEYS}
        self._wire(ImageInputs(self.adapter, self._precision(), self.stats, feature_cache_bytes=feature_cache_bytes,
                               pixel_cache_bytes=pixel_cache_bytes, vision_batch_size=vision_batch_size or batch_size))

    def _precision(self) -> Precision:
        return Precision(self.model, self.precision, self.device, trainable=self.in_memory)

    def _wire(self, images: ImageInputs) -> None:
        """The parts over ``images`` and ``stats``: the forward, the prefix runs, the batch plan and the paths."""
        guard = functools.partial(guarded, self.identity.get("model", type(self.model).__name__))
        forward = Forward(self.adapter, images.precision, self.pad_id, self.stats)
        self._images = images
        self._prefix_runs = PrefixRuns(images, forward, self._cache_bytes[2], guard)
        planner = Planner(images, self.batch_size, self._prefix_runs.stored, guard)
        self._paths = Paths(images, planner, forward, self._prefix_runs, self.shares_prefixes, guard)

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

    @classmethod
    def from_model(cls, model, processor, *, device: str | None = None, precision: str = "auto",
                   batch_size: int = 16, feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                   pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES,
                   prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> "HFVLMScorer":
        """A loaded image-text-to-text model and its processor, scored as they stand: no copy of the weights and no
        ``.to()`` (``device`` may only name the model's own device), eval mode and ``no_grad`` only while scoring
        (the mode each module had is put back after every call). The identity is ``from_pretrained``'s for the
        directory ``model.save_pretrained`` would write, taken from the tensors in place (``model_weight_hashes``:
        nothing is written), and the config's ``_name_or_path`` (``in-memory`` when empty) as the model's name; a
        peft model's adapters (``in_memory.adapters``) beside it, and its base's and adapters' own digests in
        ``weights_sha256`` (``base``, ``adapter``)."""
        model = unwrapped(model)  # a peft model's base with its adapters in place; a DDP / compiled model's module
        if processor is None:
            raise TypeError("from_model needs processor: the model's processor (e.g. AutoProcessor.from_pretrained "
                            "of its checkpoint)")
        supported_adapter(model.config)  # UnsupportedArchitecture before the weights are hashed
        own = _own_device(model, device)
        identity = {"model": getattr(model.config, "_name_or_path", "") or IN_MEMORY,
                    "weights_sha256": model_weight_hashes(model),
                    "attn_implementation": getattr(model.config, "_attn_implementation", None)}
        carried = adapters(model)
        if carried:  # a peft model: its base and its adapters, each named and hashed
            identity["adapters"] = carried
        return cls(model, processor, device=own, precision=precision, batch_size=batch_size, identity=identity,
                   feature_cache_bytes=feature_cache_bytes, pixel_cache_bytes=pixel_cache_bytes,
                   prefix_cache_bytes=prefix_cache_bytes, in_memory=True)

    def replaced(self, *, model=None, precision: str | None = None,
                 prefix_cache_bytes: int | None = None) -> "HFVLMScorer":
        """A scorer like this one with another model (e.g. bf16 weights), precision or prefix store bound (0: no
        prefix sharing), and empty caches; the weights are shared, never copied."""
        other = copy.copy(self)
        if prefix_cache_bytes is not None:
            other._cache_bytes = (*self._cache_bytes[:2], prefix_cache_bytes)
            other.identity = {**self.identity, "prefix_sharing": other._prefix_sharing()}
        if model is not None:
            other.model = model.eval()
        other.adapter = type(self.adapter)(other.model, self.processor)  # its own, never shared
        if precision is not None:
            other.precision = check_precision(precision)
        other.stats = {k: 0 for k in STAT_KEYS}
        other._wire(self._images.renewed(other.adapter, other._precision(), other.stats))
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
        no later row asks for (``run.pipeline.variant_rows.VariantImages``); asked for again, an image is prepared, encoded
        and run anew."""
        gone = set(digests)
        self._images.forget(gone)
        self._prefix_runs.store.forget(gone)

    def batch_precision(self) -> str:
        """``bf16`` when the batch path runs under bf16 autocast (CUDA with ``auto``, or ``bf16``), else ``fp32``."""
        return batch_precision(self.precision, self.device)

    def prepare(self, row: Row) -> PreparedRow:
        """Template, image inputs and token ids of a row (each part cached by content)."""
        return self._images.prepare(row)

    def encode(self, row: Row) -> EncodedRow:
        """The row's prompt ids, pixels and option ids as one model call takes them (used by the training recipe)."""
        return self._images.encode(row)

    # -- scoring --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _scoring(self):
        """The model in eval mode while scoring (under ``no_grad`` when in memory); each module's mode put back."""
        import torch

        modes = [(module, module.training) for module in self.model.modules()]
        self.model.eval()
        try:
            with torch.no_grad() if self.in_memory else contextlib.nullcontext():
                yield
        finally:
            for module, training in modes:
                module.training = training

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Logits (label order) of every row: all options of a row in one sequence, ``batch_size`` rows a forward,
        each shareable prompt prefix run once."""
        with self._scoring():
            return self._paths.score_rows(rows, one_pass=True, share=True)

    def score_batch_unshared(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path with every row's whole prompt in its forward: the reference of the shared prefixes."""
        with self._scoring():
            return self._paths.score_rows(rows, one_pass=True, share=False)

    def score_batch_per_option(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path with one sequence per (row, option), each over the whole prompt: the reference of the
        one-pass batch path."""
        with self._scoring():
            return self._paths.score_rows(rows, one_pass=False, share=False)

    def score_predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """fp32 logits (label order) of the given rows (one image's questions) in one call."""
        with self._scoring():
            return self._paths.predict(rows, use_cache)

    def layer_states(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Per row, fp32 hidden states (n_layers + 1, hidden) at the last prompt position.

        Entry 0 is the embedding output (image features in place), entry i the output of decoder
        layer i; the last entry is after the model's final norm, as transformers reports it.
        """
        with self._scoring():
            return self._paths.layer_states(rows)

    def generate(self, rows: Sequence[Row], max_new_tokens: int = 16) -> list[str]:
        """Greedy answer text after each row's prompt (fp32, deterministic), without the end token."""
        stop = {self.tokenizer.convert_tokens_to_ids(self.eos_token), self.tokenizer.eos_token_id}
        with self._scoring():
            return self._paths.generate(rows, stop, max_new_tokens)


def _own_device(model, device: str | None) -> str:
    """The device of the model's weights; ValueError naming ``device`` when it is given and names another."""
    import torch

    own = next(model.parameters()).device
    if device is None:
        return str(own)
    try:
        wanted = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device: {exc}") from exc
    if wanted.type != own.type or (wanted.index is not None and wanted.index != (own.index or 0)):
        raise ValueError(f"device {device!r} is not the model's own device {str(own)!r}: from_model scores the "
                         f"model where it is (move it first, or leave device out)")
    return str(own)


def _resolve_local_dir(name_or_path: str) -> Path | None:
    """The checkpoint's local directory, or None when there is none (the dual-encoder scorer's hashes use it)."""
    try:
        return resolve_checkpoint(str(name_or_path))
    except ModelLoadError:
        return None
