"""Sequence layouts for option scoring: a prompt followed by option blocks, their positions and attention masks.

One pass scores all k options of a row in one sequence: ``prompt | o_1[:-1] | o_2[:-1] | ...``.
Every token carries its *logical index* (where it would sit if its option were the only one after
the prompt: prompt token i -> i, option token t -> P + t) and its *segment* (0 prompt, j option j).
Token q attends to token k when

    valid(k)  and  (seg(k) == 0 or seg(k) == seg(q))
              and  (logical(k) <= logical(q)  or  block(q) == block(k) >= 0)
              [and logical(q) - logical(k) < window    on sliding-window layers]

so each option sees the prompt and its own earlier tokens, exactly as in its own sequence
(``block`` marks bidirectional prompt spans: PaliGemma's prefix, Gemma 3's images). Rope
positions of option token t are the last prompt position + 1 + t in every rope dimension.
Option j's log-likelihood sums log p(o_j[t] | ...) read at the last prompt token (t = 0) and at
o_j[t - 1] (t > 0): the last option token is never fed. Example (P = 3, options of 1 and 2 tokens)::

    >>> p = Prompt(ids=(5, 6, 7), positions=np.arange(3)[None], blocks=np.full(3, -1))
    >>> s = pack(p, [[8], [9, 10]])
    >>> s.ids, s.segments, s.logical
    ([5, 6, 7, 9], [0, 0, 0, 2], [0, 1, 2, 3])
    >>> s.targets                       # (index whose logits predict the token, token) per option
    [[(2, 8)], [(2, 9), (3, 10)]]

A row whose prompt prefix is already computed (its keys and values come as a cache, ``scoring.prefixes``)
runs only the tokens after it: ``collate(..., prefix_lengths=...)`` keeps each row's prefix at the start
and starts every row's own tokens after the longest prefix, the queries of the forward::

    >>> b = collate([s, pack(p, [[8]])], pad_id=0, prefix_lengths=[2, 1])
    >>> b.ids.tolist(), b.valid.astype(int).tolist()
    ([[5, 6, 7, 9], [5, 0, 6, 7]], [[1, 1, 1, 1], [1, 0, 1, 1]])
    >>> after_prefix(s.targets, 2)                   # indices among the queries (from column 2)
    [[(0, 8)], [(0, 9), (1, 10)]]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Prompt:
    """A row's prompt as the language model sees it: ids, rope positions (n_dims, P) and bidirectional blocks."""

    ids: tuple[int, ...]
    positions: np.ndarray
    blocks: np.ndarray

    def __post_init__(self):
        n = len(self.ids)
        if n == 0:
            raise ValueError("a prompt needs at least one token")
        if self.positions.ndim != 2 or self.positions.shape[1] != n or self.blocks.shape != (n,):
            raise ValueError(f"positions {self.positions.shape} / blocks {self.blocks.shape} do not fit {n} ids")


@dataclass
class Packed:
    """One sequence: token ids, segments, logical indices, blocks, positions and per-option targets."""

    ids: list[int]
    segments: list[int]
    logical: list[int]
    blocks: list[int]
    positions: np.ndarray  # (n_dims, S)
    targets: list[list[tuple[int, int]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def pack(prompt: Prompt, options: list[list[int]]) -> Packed:
    """The prompt followed by every option's inputs (all but its last token), with the options' targets."""
    n = len(prompt.ids)
    ids, segments, logical = list(prompt.ids), [0] * n, list(range(n))
    blocks = [int(b) for b in prompt.blocks]
    last = prompt.positions[:, -1:]
    positions = [prompt.positions]
    targets = []
    for j, option in enumerate(options, start=1):
        if not option:
            raise ValueError("an option needs at least one token")
        fed = option[:-1]
        start = len(ids)
        ids += fed
        segments += [j] * len(fed)
        logical += [n + t for t in range(len(fed))]
        blocks += [-1] * len(fed)
        positions.append(last + 1 + np.arange(len(fed))[None, :])
        targets.append([(n - 1, option[0])] + [(start + t, option[t + 1]) for t in range(len(fed))])
    return Packed(ids, segments, logical, blocks, np.concatenate(positions, axis=1), targets)


@dataclass
class Batch:
    """Right-padded tensors of several packed sequences (numpy; moved to the device by the caller)."""

    ids: np.ndarray  # (B, S) int64
    valid: np.ndarray  # (B, S) bool
    segments: np.ndarray  # (B, S) int64, -1 on padding
    logical: np.ndarray  # (B, S) int64
    blocks: np.ndarray  # (B, S) int64
    positions: np.ndarray  # (n_dims, B, S) int64


def collate(seqs: list[Packed], pad_id: int, prefix_lengths: list[int] | None = None) -> Batch:
    """Right-pad the sequences to the longest; padding is invalid, segment -1, position 0.

    With ``prefix_lengths``, sequence i keeps its first ``prefix_lengths[i]`` tokens at the start and its
    other tokens start at column ``max(prefix_lengths)``; the gap between is padding.
    """
    if not seqs:
        raise ValueError("nothing to collate")
    prefix = list(prefix_lengths) if prefix_lengths is not None else [0] * len(seqs)
    if len(prefix) != len(seqs) or any(not 0 <= n < len(x) for n, x in zip(prefix, seqs)):
        raise ValueError(f"prefix lengths {prefix} do not fit sequences of {[len(x) for x in seqs]} tokens")
    start = max(prefix)
    b, s = len(seqs), start + max(len(x) - n for x, n in zip(seqs, prefix))
    dims = seqs[0].positions.shape[0]
    out = Batch(np.full((b, s), pad_id, np.int64), np.zeros((b, s), bool), np.full((b, s), -1, np.int64),
                np.zeros((b, s), np.int64), np.full((b, s), -1, np.int64), np.zeros((dims, b, s), np.int64))
    for i, (x, n) in enumerate(zip(seqs, prefix)):
        end = start + len(x) - n  # (columns, tokens) slices: one run, or the prefix and the rest after the gap
        runs = [(slice(0, end), slice(None))] if n == start else [(slice(0, n), slice(0, n)),
                                                                  (slice(start, end), slice(n, None))]
        for to, of in runs:
            out.ids[i, to], out.valid[i, to], out.segments[i, to] = x.ids[of], True, x.segments[of]
            out.logical[i, to], out.blocks[i, to] = x.logical[of], x.blocks[of]
            out.positions[:, i, to] = x.positions[:, of]
    return out


def after_prefix(targets: list[list[tuple[int, int]]], prefix_length: int) -> list[list[tuple[int, int]]]:
    """A sequence's targets with indices counted from its first token after the prefix (where a forward over a
    cached prefix reads its hidden states)."""
    return [[(s - prefix_length, t) for s, t in option] for option in targets]


def allowed(batch: Batch, query_start: int = 0, window: int | None = None, device="cpu"):
    """(B, Q, K) bool torch tensor on ``device``: may query q (from ``query_start`` on) attend to key k (every
    position). Built on the device from the (B, S) index arrays: a (B, S, S) mask is large for long prompts
    (16 rows of 1,200 tokens: 23M entries), too large to build on the host and copy for every forward."""
    import torch

    def on_device(a: np.ndarray):
        return torch.from_numpy(a).to(device)

    valid, segments, logical, blocks = (on_device(a) for a in (batch.valid, batch.segments, batch.logical,
                                                               batch.blocks))
    q = slice(query_start, None)
    seg_q, seg_k = segments[:, q, None], segments[:, None, :]
    log_q, log_k = logical[:, q, None], logical[:, None, :]
    blk_q, blk_k = blocks[:, q, None], blocks[:, None, :]
    same_block = (blk_q == blk_k) & (blk_q >= 0)
    ok = valid[:, None, :] & ((seg_k == 0) | (seg_k == seg_q)) & ((log_k <= log_q) | same_block)
    if window is not None:
        ok &= (log_q - log_k) < window
    # a padding query attends to itself only, so no softmax row is empty
    pad_q = ~batch.valid[:, q]
    if pad_q.any():
        rows, queries = np.nonzero(pad_q)
        ok[on_device(rows), on_device(queries)] = False
        ok[on_device(rows), on_device(queries), on_device(queries + query_start)] = True
    return ok


def additive_mask(ok, dtype):
    """(B, 1, Q, K) float mask for eager / sdpa attention from ``allowed``'s bool mask, on its device: 0 where
    allowed, the dtype's minimum elsewhere."""
    import torch

    zero = torch.zeros((), dtype=dtype, device=ok.device)
    return torch.where(ok[:, None], zero, torch.finfo(dtype).min)
