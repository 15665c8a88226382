"""Scorer for Hugging Face image-text-to-text models (SmolVLM / Idefics3 first), batch and predict paths."""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring.base import to_label_order
from laya_robustness.scoring.prompt import answer_text, chat_messages

PRECISIONS = ("auto", "fp32", "bf16")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class ModelLoadError(RuntimeError):
    """The model or processor could not be loaded (a harness error, not a gate failure)."""


@dataclass
class EncodedRow:
    """A row's prompt ids, its pixels (or None) and its options' answer ids, in display order."""

    prompt_ids: list[int]
    pixel_values: "object | None"  # torch.Tensor (n_images, 3, H, W)
    pixel_mask: "object | None"  # torch.Tensor (n_images, H, W)
    option_ids: list[list[int]]


def weight_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every weight file in a checkpoint directory, by file name."""
    out = {}
    for path in sorted(directory.iterdir()):
        if path.suffix in WEIGHT_SUFFIXES:
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _resolve_local_dir(name_or_path: str) -> Path | None:
    path = Path(name_or_path)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception:  # not in the local cache: no hashes to report
        return None


class HFVLMScorer:
    """Scores rows with a generative VLM: an option's logit is the log-likelihood of its answer text.

    Batch path: every (row, option) sequence of up to ``batch_size`` rows in one
    right-padded forward; bf16 autocast on CUDA with precision ``auto``, fp32 on CPU.
    Predict path: fp32, one call per image's questions; the prompt runs once and
    each option continues from its cached keys/values (``use_cache=True``), or
    runs prompt + option from scratch (``use_cache=False``).
    """

    def __init__(self, model, processor, *, device: str = "cpu", precision: str = "auto",
                 batch_size: int = 16, identity: dict | None = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
        self.model, self.processor = model.eval(), processor
        self.tokenizer = processor.tokenizer
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self.identity = identity or {}
        self.eos_token = self.tokenizer.eos_token or "<end_of_utterance>"
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str = "cpu", precision: str = "auto",
                        batch_size: int = 16, attn_implementation: str = "eager") -> "HFVLMScorer":
        """Load a hub id or a local directory through ``AutoProcessor`` + ``AutoModelForImageTextToText``."""
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(name_or_path)
            model = AutoModelForImageTextToText.from_pretrained(
                name_or_path, dtype=torch.float32, attn_implementation=attn_implementation)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load model {name_or_path!r}: {exc}") from exc
        local = _resolve_local_dir(name_or_path)
        identity = {"model": str(name_or_path), "weights_sha256": weight_hashes(local) if local else {},
                    "attn_implementation": attn_implementation}
        return cls(model.to(device), processor, device=device, precision=precision,
                   batch_size=batch_size, identity=identity)

    # -- encoding -------------------------------------------------------------------------------

    def encode(self, row: Row) -> EncodedRow:
        """Tokenize the chat-templated prompt with its images, and each shown option's answer."""
        text = self.processor.apply_chat_template(chat_messages(row), add_generation_prompt=True)
        images = [list(row.images)] if row.images else None
        enc = self.processor(text=[text], images=images, return_tensors="pt")
        pixels = enc.get("pixel_values")
        mask = enc.get("pixel_attention_mask")
        options = [self.tokenizer(answer_text(o, self.eos_token), add_special_tokens=False)["input_ids"]
                   for o in row.shown_options]
        return EncodedRow(enc["input_ids"][0].tolist(), None if pixels is None else pixels[0],
                          None if mask is None else mask[0], options)

    def batch_precision(self) -> str:
        """``bf16`` when the batch path runs under bf16 autocast (CUDA with ``auto``, or ``bf16``), else ``fp32``."""
        on_cuda = str(self.device).startswith("cuda")
        return "bf16" if self.precision == "bf16" or (self.precision == "auto" and on_cuda) else "fp32"

    def _autocast(self, path: str):
        import torch

        if path == "batch" and self.batch_precision() == "bf16":
            device_type = "cuda" if str(self.device).startswith("cuda") else "cpu"
            return torch.autocast(device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # -- batch path -------------------------------------------------------------------------------

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Logits (label order) of every row, ``batch_size`` rows per forward."""
        out: list[np.ndarray] = []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            encoded = [self.encode(r) for r in chunk]
            shown = self._forward_sequences(encoded)
            out += [to_label_order(r, s) for r, s in zip(chunk, shown)]
        return out

    def _forward_sequences(self, encoded: list[EncodedRow]) -> list[list[float]]:
        """One right-padded forward over every (row, option) sequence; option log-likelihoods per row."""
        import torch

        seqs = [(e, o) for e in encoded for o in e.option_ids]
        length = max(len(e.prompt_ids) + len(o) for e, o in seqs)
        input_ids = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, (e, o) in enumerate(seqs):
            ids = e.prompt_ids + o
            input_ids[i, :len(ids)] = torch.tensor(ids)
            attention[i, :len(ids)] = 1
        inputs = {"input_ids": input_ids, "attention_mask": attention}
        inputs.update(self._stack_pixels([e for e, _ in seqs]))
        with torch.inference_mode(), self._autocast("batch"):
            logits = self.model(**{k: v.to(self.device) for k, v in inputs.items()}).logits
        scores = [self._option_loglik(logits[i], len(e.prompt_ids), o) for i, (e, o) in enumerate(seqs)]
        per_row, k = [], 0
        for e in encoded:
            per_row.append(scores[k:k + len(e.option_ids)])
            k += len(e.option_ids)
        return per_row

    @staticmethod
    def _stack_pixels(encoded: list[EncodedRow]) -> dict:
        """Pixels padded to the batch's most images (all-zero images are padding to Idefics3)."""
        import torch

        with_images = [e for e in encoded if e.pixel_values is not None]
        if not with_images:
            return {}
        n_img = max(e.pixel_values.shape[0] for e in with_images)
        channels = with_images[0].pixel_values.shape[1]
        height = max(e.pixel_values.shape[2] for e in with_images)
        width = max(e.pixel_values.shape[3] for e in with_images)
        pixels = torch.zeros((len(encoded), n_img, channels, height, width), dtype=torch.float32)
        mask = torch.zeros((len(encoded), n_img, height, width), dtype=torch.bool)
        for i, e in enumerate(encoded):
            if e.pixel_values is None:
                continue
            n, _, h, w = e.pixel_values.shape
            pixels[i, :n, :, :h, :w] = e.pixel_values
            mask[i, :n, :h, :w] = e.pixel_mask.bool() if e.pixel_mask is not None else True
        return {"pixel_values": pixels, "pixel_attention_mask": mask}

    @staticmethod
    def _option_loglik(seq_logits, prompt_len: int, option_ids: list[int]) -> float:
        """Sum of log p(option token t | everything before t) over the option's tokens."""
        import torch

        rows = seq_logits[prompt_len - 1:prompt_len - 1 + len(option_ids)].float()
        logp = torch.log_softmax(rows, dim=-1)
        return float(logp[torch.arange(len(option_ids)), torch.tensor(option_ids)].sum())

    # -- predict path -----------------------------------------------------------------------------

    def score_predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """fp32 logits (label order) of the given rows (one image's questions) in one call."""
        return [to_label_order(r, self._predict_one(self.encode(r), use_cache)) for r in rows]

    def _predict_one(self, e: EncodedRow, use_cache: bool) -> list[float]:
        import torch

        pixels = self._stack_pixels([e])
        pixels = {k: v.to(self.device) for k, v in pixels.items()}
        prompt = torch.tensor([e.prompt_ids], device=self.device)
        with torch.inference_mode():
            if not use_cache:
                return [self._full_forward(prompt, o, pixels) for o in e.option_ids]
            out = self.model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True, **pixels)
            cache, first = out.cache, out.logits[0, -1:]
            scores = []
            for o in e.option_ids:
                logits = first
                if len(o) > 1:
                    cont = torch.tensor([o[:-1]], device=self.device)
                    mask = torch.ones((1, prompt.shape[1] + cont.shape[1]), dtype=torch.long, device=self.device)
                    step = self.model(input_ids=cont, attention_mask=mask, cache=cache, use_cache=True)
                    logits = torch.cat([first, step.logits[0]], dim=0)
                    cache.crop(-cont.shape[1])  # back to the prompt alone
                logp = torch.log_softmax(logits.float(), dim=-1)
                scores.append(float(logp[torch.arange(len(o)), torch.tensor(o, device=self.device)].sum()))
            return scores

    def _full_forward(self, prompt, option_ids: list[int], pixels: dict) -> float:
        import torch

        ids = torch.cat([prompt, torch.tensor([option_ids], device=self.device)], dim=1)
        logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), **pixels).logits[0]
        return self._option_loglik(logits, prompt.shape[1], option_ids)
