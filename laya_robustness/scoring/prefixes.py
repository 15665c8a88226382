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
    """A prefix's keys and values, one (key, value) pair of (1, kv_heads, length, head_dim) tensors per layer."""

    length: int
    layers: tuple

    @property
    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for pair in self.layers for t in pair)

    @classmethod
    def from_cache(cls, cache, row: int, length: int) -> "PrefixKV":
        """Row ``row``'s first ``length`` positions of a forward's ``DynamicCache`` (copied: the batch's tensors
        are not kept alive by it)."""
        return cls(length, tuple((layer.keys[row:row + 1, :, :length].clone(),
                                  layer.values[row:row + 1, :, :length].clone()) for layer in cache.layers))


def batch_cache(prefixes: Sequence[PrefixKV]):
    """A ``DynamicCache`` holding these prefixes as a batch, each right-padded (zeros) to the longest: the cache of
    a forward over ``layout.collate(..., prefix_lengths=[p.length for p in prefixes])``, whose attention mask
    never lets a query see the padding."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    longest = max(p.length for p in prefixes)

    def stacked(layer: int, which: int):
        parts = [p.layers[layer][which] for p in prefixes]
        return torch.cat([F.pad(t, (0, 0, 0, longest - t.shape[2])) for t in parts]) if len(parts) > 1 else parts[0]

    return DynamicCache([(stacked(i, 0), stacked(i, 1)) for i in range(len(prefixes[0].layers))])
