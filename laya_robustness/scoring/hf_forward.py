"""The Hugging Face scorer's language-model forward: a path's precision, the embeddings of a collated batch with its
rows' image features in place, the attention masks, one forward, and the options' log-likelihoods read from it.

An option's logit is log p(answer text | prompt) summed over the answer's tokens: ``Forward.log_likelihoods`` runs
the LM head once per distinct position (the last prompt token is shared by all options of a row). Each forward
counts in ``stats``: ``forwards``, ``sequences`` and ``tokens`` (the language-model tokens it computes, after
``query_start``). The batch path runs under bf16 autocast where ``batch_precision`` says so (CUDA with ``auto``, or
``bf16``); the predict path in fp32. Autograd is off in inference mode, or under ``no_grad`` for a model scored in
memory (``HFVLMScorer.from_model``), whose weights must stay trainable: inference mode's tensors could not enter a
later training step.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np

from laya_robustness.scoring import layout
from laya_robustness.scoring.base import batch_precision

PRECISIONS = ("auto", "fp32", "bf16")


def check_precision(precision: str) -> str:
    """``precision`` itself when it is one of ``PRECISIONS``, else ValueError naming it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
    return precision


class Precision:
    """How a path runs: its mode (the weights' dtype and the autocast; every store keys by it), its autocast, and
    how autograd is off (``trainable``: ``no_grad`` instead of inference mode)."""

    def __init__(self, model, precision: str, device: str, trainable: bool = False):
        self.model, self.precision, self.device, self.trainable = model, precision, device, trainable

    def batch(self) -> str:
        """``bf16`` when the batch path runs under bf16 autocast, else ``fp32``."""
        return batch_precision(self.precision, self.device)

    def mode(self, path: str) -> str:
        """The precision a path runs in: the feature and prefix stores keep an image once per mode."""
        dtype = str(next(self.model.parameters()).dtype).replace("torch.", "")
        autocast = self.batch() if path == "batch" else "fp32"
        return f"{dtype}/{autocast}"

    def autocast(self, path: str):
        import torch

        if path == "batch" and self.batch() == "bf16":
            device_type = "cuda" if str(self.device).startswith("cuda") else "cpu"
            return torch.autocast(device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def no_grad(self):
        """Autograd off: inference mode, or ``no_grad`` where the weights must stay trainable."""
        import torch

        return torch.no_grad() if self.trainable else torch.inference_mode()


class Forward:
    """Language-model forwards of collated sequences (``layout.Batch``) and the log-likelihoods read from them."""

    def __init__(self, adapter, precision: Precision, pad_id: int, stats: dict):
        self.adapter, self.precision, self.pad_id, self.stats = adapter, precision, pad_id, stats
        self.device = precision.device

    def masks(self, batch: layout.Batch, dtype, query_start: int = 0):
        full = layout.additive_mask(layout.allowed(batch, query_start, device=self.device), dtype)
        window = self.adapter.sliding_window()
        if window is None:
            return full
        sliding = layout.additive_mask(layout.allowed(batch, query_start, window, self.device), dtype)
        return {"full_attention": full, "sliding_attention": sliding}

    def embed(self, batch: layout.Batch, seqs: Sequence, features: dict):
        """Token embeddings with each row's image features (``features[group key]``) placed at its image tokens;
        ``seqs`` are the batch's prepared rows (``hf_images.PreparedRow``)."""
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

    def embed_ids(self, ids):
        """Token embeddings of token ids (a numpy array, or nested lists) on the device: tokens with no image."""
        import torch

        ids = torch.from_numpy(ids) if isinstance(ids, np.ndarray) else torch.tensor(ids)
        return self.adapter.embed(ids.to(self.device))

    def run(self, batch: layout.Batch, embeds, query_start: int = 0, cache=None, **kwargs):
        """One language-model forward of the batch's queries (from ``query_start``); hidden states and cache."""
        import torch

        positions = torch.from_numpy(batch.positions[:, :, query_start:]).to(self.device)
        if positions.shape[0] == 1:
            positions = positions[0]
        masks = self.masks(batch, embeds.dtype, query_start)
        self.stats["forwards"] += 1
        self.stats["sequences"] += batch.ids.shape[0]
        self.stats["tokens"] += int(batch.valid[:, query_start:].sum())
        return self.adapter.language_model(inputs_embeds=embeds, attention_mask=masks, position_ids=positions,
                                           cache=cache, use_cache=cache is not None, **kwargs)

    def log_likelihoods(self, hidden, targets: list[list[list[tuple[int, int]]]]) -> list[list[float]]:
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

    def score_sequences(self, items: Sequence[tuple], features: dict, path: str) -> list[list[float]]:
        """One forward over sequences ``prompt | options[j][:-1] for j in item`` of (prepared row, option indices)
        items: log-likelihood per option."""
        seqs = [layout.pack(p.prompt, [list(p.options[j]) for j in js]) for p, js in items]
        batch = layout.collate(seqs, self.pad_id)
        with self.precision.no_grad(), self.precision.autocast(path):
            embeds = self.embed(batch, [p for p, _ in items], features)
            hidden = self.run(batch, embeds).last_hidden_state
            return self.log_likelihoods(hidden, [s.targets for s in seqs])

    @contextlib.contextmanager
    def whole_prompts(self):
        """Count the tokens of the forwards inside in ``tokens_alone`` too: they run every prompt whole."""
        before = self.stats["tokens"]
        try:
            yield
        finally:
            self.stats["tokens_alone"] += self.stats["tokens"] - before
