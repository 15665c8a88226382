"""Shared prompt prefixes: where a prompt's shareable part ends, its keys and values as kept, and a batch's cache.

Every supported template puts a row's images before its text, so the rows about one image (the orig
row and its text-side variants: option order, rewording, rephrasing, ...) share their prompt up to its
last image token; on a real model that is most of the prompt (SmolVLM-256M: 17 tiles x 64 tokens of
about 1,130). The prefix is run once; its keys and values, layer by layer (``PrefixKV``), are kept by
content, and each row then runs only its own tokens (the rest of its prompt and its options) against
them. A prefix is shareable when none of its tokens attends to a later one: a bidirectional block
(PaliGemma's whole prompt, a Gemma 3 image) must not straddle its end.

    >>> import numpy as np
    >>> shared_length([1, 9, 9, 2, 3], np.full(5, -1), image_token_id=9)    # through the last image token
    3
    >>> shared_length([9, 9, 2, 3], np.zeros(4, dtype=int), image_token_id=9)  # a prefix-LM: all one block
    0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def shared_length(ids: Sequence[int], blocks: np.ndarray, image_token_id: int) -> int:
    """Tokens of a prompt through its last image token, or 0 where nothing can be shared: the prompt has no
    image, nothing follows the last image token, or a bidirectional block spans the cut."""
    where = np.flatnonzero(np.asarray(ids) == image_token_id)
    if not len(where) or where[-1] + 1 >= len(ids):
        return 0
    end = int(where[-1]) + 1
    before, after = set(blocks[:end].tolist()), set(blocks[end:].tolist())
    return 0 if (before & after) - {-1} else end


@dataclass(frozen=True)
class PrefixKV:
    """A prefix's keys and values in one tensor of (2 x layers, kv_heads, length, head_dim): ``kv[2 * i]`` the keys
    and ``kv[2 * i + 1]`` the values of layer i (one copy a prefix, and one stack a batch, whatever the layers)."""

    length: int
    kv: object  # torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.kv.element_size() * self.kv.nelement()

    @classmethod
    def from_cache(cls, cache, row: int, length: int) -> "PrefixKV":
        """Row ``row``'s first ``length`` positions of a forward's ``DynamicCache``, copied into a tensor of its own (the
        batch's tensors are not kept alive by it)."""
        import torch

        return cls(length, torch.stack([t[row, :, :length] for layer in cache.layers
                                        for t in (layer.keys, layer.values)]))


def batch_cache(prefixes: Sequence[PrefixKV]):
    """A ``DynamicCache`` holding these prefixes as a batch, each right-padded (zeros) to the longest: the cache of
    a forward over ``layout.collate(..., prefix_lengths=[p.length for p in prefixes])``, whose attention mask
    never lets a query see the padding."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    longest = max(p.length for p in prefixes)
    parts = [p.kv if p.length == longest else F.pad(p.kv, (0, 0, 0, longest - p.length)) for p in prefixes]
    both = parts[0][:, None] if len(parts) == 1 else torch.stack(parts, dim=1)  # (2 x layers, batch, heads, S, dim)
    return DynamicCache([(both[i], both[i + 1]) for i in range(0, both.shape[0], 2)])


class WindowPrefixes:
    """The prefixes of a window's buckets, run ahead in few forwards and held only until their bucket is scored.

    ``buckets[j]`` lists the (prefix key, length) of bucket j's rows with a shareable prefix. When bucket j
    lacks a prefix (neither held nor stored), ``to_run(j, stored)`` gives the prefixes one forward over prefixes
    alone runs: all that bucket j lacks, then, in bucket order, those the buckets after it lack, while the
    forward, padded to its longest prefix, holds at most ``max_tokens`` tokens. On a small model a forward costs
    about the same whatever its length, so a bucket of rows with new images costs about one forward, not two.
    ``held`` keeps what ran ahead until its bucket is done (then the store has it, where it has room), so it
    holds about one forward's prefixes. A row counts as a hit (``is_hit``) unless its prefix ran for its bucket.

        >>> plan = WindowPrefixes([[("a", 3), ("b", 3)], [("c", 3)], [("a", 3), ("d", 3)]], max_tokens=9)
        >>> plan.to_run(0, stored=lambda key: False)      # bucket 0's own, then c; d would make 12 tokens
        ['a', 'b', 'c']
        >>> plan.held.update(dict.fromkeys("abc")); plan.done(0); sorted(plan.held)
        ['c']
        >>> plan.to_run(1, stored=lambda key: False), plan.is_hit("c", 1)
        ([], False)
        >>> plan.done(1); plan.to_run(2, stored=lambda key: key == "a"), plan.is_hit("a", 2)
        (['d'], True)
    """

    def __init__(self, buckets: Sequence[Sequence[tuple]], max_tokens: int):
        self.buckets = [list(dict.fromkeys(bucket)) for bucket in buckets]
        self.max_tokens = max_tokens
        self.held: dict = {}
        self.ran_for: dict = {}  # prefix key -> the bucket it last ran for

    def to_run(self, j: int, stored) -> list:
        """The prefixes to run before bucket ``j`` (none when it lacks none); ``stored(key)``: the store holds it."""
        if all(key in self.held or stored(key) for key, _ in self.buckets[j]):
            return []
        picked: dict = {}
        longest = 0
        for k in range(j, len(self.buckets)):
            for key, length in self.buckets[k]:
                if key in picked or key in self.held or stored(key):
                    continue
                if k > j and (len(picked) + 1) * max(longest, length) > self.max_tokens:
                    return list(picked)
                picked[key] = self.ran_for[key] = k
                longest = max(longest, length)
        return list(picked)

    def is_hit(self, key, j: int) -> bool:
        """Whether a row of bucket ``j`` found its prefix computed before (stored, or run for an earlier bucket)."""
        return self.ran_for.get(key) != j

    def done(self, j: int) -> None:
        """Bucket ``j`` is scored: let go of its prefixes (a later bucket reads them from the store, or runs them)."""
        for key, _ in self.buckets[j]:
            self.held.pop(key, None)
