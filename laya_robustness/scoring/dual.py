"""Scorer for CLIP / SigLIP dual encoders: an option's logit is the cosine similarity of image and text.

s(I, c) = <f(I), g(c)> / (|f(I)| |g(c)|), with f and g the model's projected image and text
embeddings (``get_image_features`` / ``get_text_features``), computed in float64 from the
float32 embeddings. The model's logit scale (and SigLIP's bias) is not applied, so softmax-CLIP
and sigmoid-SigLIP models give numbers on the same [-1, 1] scale; both go into ``identity``.

A row needs exactly one image; each of its options is scored against it, so a caption row
(primitive ``score``) gets ``[s(I, caption)]`` and a choice row is scored zero-shot.
Every text is padded to the text encoder's full length (SigLIP pools the last position and
was trained that way; for CLIP it keeps a text's shapes independent of its neighbours), and
SigLIP gets no text attention mask, as in its training.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring.base import batch_precision, to_label_order
from laya_robustness.scoring.hf import PRECISIONS, ModelLoadError, _resolve_local_dir
from laya_robustness.weights import weight_hashes

#: ``config.model_type`` of the checkpoints this scorer loads.
DUAL_ENCODER_TYPES = ("clip", "siglip")
SIMILARITY = ("cosine similarity of the L2-normalised projected image and text embeddings "
              "(float64 from float32 embeddings); logit scale and bias not applied")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def dual_encoder_kind(name_or_path: str) -> str | None:
    """``"clip"`` or ``"siglip"`` when the checkpoint's ``config.model_type`` is one of them, else None.

    Reads only the config (local files only when ``HF_HUB_OFFLINE`` is set); a checkpoint
    whose config cannot be read gives None.
    """
    from transformers import AutoConfig

    try:
        model_type = AutoConfig.from_pretrained(name_or_path, local_files_only=_offline()).model_type
    except (OSError, ValueError, KeyError):
        return None
    return model_type if model_type in DUAL_ENCODER_TYPES else None


def _image_key(image) -> tuple:
    """Content key of a PIL image: mode, size and the sha256 of its pixels."""
    return (image.mode, image.size, hashlib.sha256(image.tobytes()).hexdigest())


class DualEncoderScorer:
    """Scores rows with a dual encoder: logit of option i = s(I, option_i), label order.

    Each distinct image (by content) and text of a call is encoded once. Batch path: up to
    ``batch_size`` images or texts per encoder forward; bf16 autocast on CUDA with precision
    ``auto``, fp32 on CPU. Predict path: fp32, all of the call's images in one forward and all
    its texts in another (no cache: ``use_cache`` changes nothing).
    """

    def __init__(self, model, processor, *, kind: str, device: str = "cpu", precision: str = "auto",
                 batch_size: int = 16, identity: dict | None = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
        if kind not in DUAL_ENCODER_TYPES:
            raise ValueError(f"kind {kind!r} is not one of {DUAL_ENCODER_TYPES}")
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.model, self.processor, self.kind = model.eval(), processor, kind
        self.tokenizer, self.image_processor = processor.tokenizer, processor.image_processor
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self.text_length = min(int(self.tokenizer.model_max_length),
                               int(model.config.text_config.max_position_embeddings))
        self.identity = {**(identity or {}), "kind": kind, "similarity": SIMILARITY,
                         "text_length": self.text_length, **self.logit_parameters()}

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str = "cpu", precision: str = "auto",
                        batch_size: int = 16, attn_implementation: str = "eager") -> "DualEncoderScorer":
        """Load a CLIP or SigLIP hub id or local directory through ``AutoProcessor`` + ``AutoModel``.

        The image processor is the PIL one (``backend="pil"``), so machines with and without
        torchvision preprocess alike; only local files are read when ``HF_HUB_OFFLINE`` is set.
        """
        import torch
        from transformers import AutoModel, AutoProcessor

        kind = dual_encoder_kind(name_or_path)
        if kind is None:
            raise ModelLoadError(f"cannot load {name_or_path!r} as a dual encoder: its config is missing or its "
                                 f"model_type is not one of {DUAL_ENCODER_TYPES}")
        local_only = _offline()
        try:
            processor = AutoProcessor.from_pretrained(name_or_path, backend="pil", local_files_only=local_only)
            model = AutoModel.from_pretrained(name_or_path, dtype=torch.float32, local_files_only=local_only,
                                              attn_implementation=attn_implementation)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load dual encoder {name_or_path!r}: {exc}") from exc
        local = _resolve_local_dir(name_or_path)
        identity = {"model": str(name_or_path), "weights_sha256": weight_hashes(local) if local else {},
                    "attn_implementation": attn_implementation}
        return cls(model.to(device), processor, kind=kind, device=device, precision=precision,
                   batch_size=batch_size, identity=identity)

    def logit_parameters(self) -> dict:
        """The model's exp(logit_scale) and logit_bias (None for CLIP), for ``identity``."""
        scale = getattr(self.model, "logit_scale", None)
        bias = getattr(self.model, "logit_bias", None)
        return {"logit_scale": None if scale is None else float(scale.detach().float().exp().reshape(-1)[0]),
                "logit_bias": None if bias is None else float(bias.detach().float().reshape(-1)[0])}

    def batch_precision(self) -> str:
        """``bf16`` when the batch path runs under bf16 autocast (CUDA with ``auto``, or ``bf16``), else ``fp32``."""
        return batch_precision(self.precision, self.device)

    def _autocast(self, path: str):
        import torch

        if path == "batch" and self.batch_precision() == "bf16":
            device_type = "cuda" if str(self.device).startswith("cuda") else "cpu"
            return torch.autocast(device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # -- encoders ---------------------------------------------------------------------------------

    def image_embeddings(self, images: Sequence) -> np.ndarray:
        """(n, d) float32 projected embeddings of PIL images, one encoder call."""
        import torch

        pixels = self.image_processor(images=list(images), return_tensors="pt")["pixel_values"]
        dtype = next(self.model.parameters()).dtype
        features = self.model.get_image_features(pixel_values=pixels.to(self.device, dtype=dtype)).pooler_output
        return features.float().cpu().numpy()

    def text_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) float32 projected embeddings of texts, padded to ``text_length``, one encoder call."""
        enc = self.tokenizer(list(texts), padding="max_length", max_length=self.text_length, truncation=True,
                             return_tensors="pt")
        inputs = {"input_ids": enc["input_ids"].to(self.device)}
        if self.kind == "clip":
            inputs["attention_mask"] = enc["attention_mask"].to(self.device)
        return self.model.get_text_features(**inputs).pooler_output.float().cpu().numpy()

    # -- scoring ----------------------------------------------------------------------------------

    def _check(self, row: Row) -> None:
        if len(row.images) != 1:
            raise ValueError(f"row {row.row_id} ({row.dataset}) has {len(row.images)} images: a dual encoder "
                             f"scores exactly one image against each option")
        if not row.options:
            raise ValueError(f"row {row.row_id} ({row.dataset}) has no option to score")

    @staticmethod
    def _embed(encode, items: list, chunk: int | None) -> np.ndarray:
        """L2-normalised float64 embeddings of ``items``, ``chunk`` items per encoder forward (None: all)."""
        chunk = chunk or len(items)
        emb = np.concatenate([encode(items[i:i + chunk]) for i in range(0, len(items), chunk)]).astype(np.float64)
        return emb / np.linalg.norm(emb, axis=1, keepdims=True)

    def _score(self, rows: Sequence[Row], path: str, chunk: int | None) -> list[np.ndarray]:
        """Cosine similarities of each row's image with its shown options, mapped to label order."""
        import torch

        if not rows:
            return []
        for row in rows:
            self._check(row)
        keys = [_image_key(r.images[0]) for r in rows]
        image_index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        images = [None] * len(image_index)
        for key, row in zip(keys, rows):
            images[image_index[key]] = row.images[0]
        texts = list(dict.fromkeys(t for r in rows for t in r.shown_options))
        text_index = {t: i for i, t in enumerate(texts)}
        with torch.inference_mode(), self._autocast(path):
            image_emb = self._embed(self.image_embeddings, images, chunk)
            text_emb = self._embed(self.text_embeddings, texts, chunk)
        out = []
        for key, row in zip(keys, rows):
            u = image_emb[image_index[key]]
            shown = [float(np.dot(u, text_emb[text_index[t]])) for t in row.shown_options]
            out.append(to_label_order(row, shown))
        return out

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Similarities (label order) of every row, up to ``batch_size`` images or texts per forward."""
        return self._score(rows, "batch", self.batch_size)

    def score_predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """fp32 similarities (label order) of the given rows, one forward for the images and one for
        the texts; ``use_cache`` has no effect."""
        return self._score(rows, "predict", None)
