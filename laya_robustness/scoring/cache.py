"""Least-recently-used stores bounded by bytes (processed pixels, vision features, prompt prefixes); images are keyed by
``laya_robustness.rows.image_digest``.

The vision features' store is segmented, so that a pass over many new images does not flush the ones reused.

Example::

    >>> store = ByteLRU(max_bytes=10)
    >>> store.put("x", "payload", nbytes=6); store.put("y", "other", nbytes=6)
    >>> "x" in store, "y" in store                  # x was evicted to stay within 10 bytes
    (False, True)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable

#: Default bounds of the scorer's stores; vision features of a 512 px SmolVLM tile are 64 x 576 fp32 = 147 KB.
DEFAULT_FEATURE_CACHE_BYTES = 1 << 30
DEFAULT_PIXEL_CACHE_BYTES = 1 << 30
#: Shared prompt prefixes' keys and values: 45 KiB a token for SmolVLM-256M in fp32 (30 layers x 2 x 3 KV heads x 64),
#: about 50 MiB for a 17-tile photo's 1,130-token prefix.
DEFAULT_PREFIX_CACHE_BYTES = 1 << 30


def tensor_bytes(value: Any) -> int:
    """Bytes held by a tensor, or by the tensors in a list / tuple / dict (anything else counts 0)."""
    if hasattr(value, "element_size") and hasattr(value, "nelement"):
        return int(value.element_size() * value.nelement())
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


class ByteLRU:
    """A mapping that evicts its least recently used entries once their bytes exceed ``max_bytes``.

    An entry larger than ``max_bytes`` is not stored at all (``put`` is then a no-op). With ``digests_of`` (the
    image content keys a key is about), ``forget(digests)`` drops every entry about those images without
    scanning the others.

    >>> store = ByteLRU(max_bytes=100, digests_of=lambda key: key)
    >>> store.put(("a", "b"), 1, nbytes=1); store.put(("b",), 2, nbytes=1); store.put(("c",), 3, nbytes=1)
    >>> store.forget(["b"]); store.keys()
    [('c',)]
    """

    def __init__(self, max_bytes: int, digests_of: Callable[[Hashable], Iterable[str]] | None = None):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evictions = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._digests_of = digests_of
        self._by_digest: dict[str, set] = {}  # image content key -> the keys about it (with digests_of)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key not in self._items:
            return default
        self._items.move_to_end(key)
        return self._items[key][0]

    def touch(self, key: Hashable) -> int | None:
        """Mark an entry as just used and return its bytes (None when it is not held)."""
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key][1]

    def put(self, key: Hashable, value: Any, nbytes: int | None = None) -> None:
        size = tensor_bytes(value) if nbytes is None else int(nbytes)
        self.discard(key)
        if size > self.max_bytes:
            return
        self._items[key] = (value, size)
        self.nbytes += size
        if self._digests_of is not None:
            for digest in self._digests_of(key):
                self._by_digest.setdefault(digest, set()).add(key)
        while self.nbytes > self.max_bytes:
            old, old_size = self._evict_one()
            self.nbytes -= old_size
            self._unindex(old)
            self.evictions += 1

    def discard(self, key: Hashable) -> None:
        """Let the entry of ``key`` go (nothing when it is not held)."""
        if key in self:
            self._discard(key)
            self._unindex(key)

    def forget(self, digests: Iterable[str]) -> None:
        """Let go of every entry about these images (needs ``digests_of``)."""
        if self._digests_of is None:
            raise TypeError("forget needs a store built with digests_of")
        for digest in digests:
            for key in list(self._by_digest.get(digest, ())):
                self.discard(key)

    def _unindex(self, key: Hashable) -> None:
        if self._digests_of is None:
            return
        for digest in self._digests_of(key):
            keys = self._by_digest.get(digest)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_digest[digest]

    def keys(self) -> list:
        """The keys held, least recently used first."""
        return list(self._items)

    def _discard(self, key: Hashable) -> None:
        if key in self._items:
            self.nbytes -= self._items.pop(key)[1]

    def _evict_one(self) -> tuple[Hashable, int]:
        """Drop the entry to evict next (the least recently used); its key and bytes."""
        key, (_, size) = self._items.popitem(last=False)
        return key, size

    def clear(self) -> None:
        self._items.clear()
        self._by_digest.clear()
        self.nbytes = 0


class SegmentedLRU(ByteLRU):
    """A ByteLRU in two segments (SLRU): a new entry enters *probation*; one asked for again while held moves to
    *protected* (at most ``protected_share`` of the bytes; its least recent entries fall back to probation).
    Evictions take probation's least recent entries first.

    A pass over many new entries (an image family's variants) then cycles through probation and leaves
    the entries asked for again (the source images every family reuses) in place, where plain LRU
    flushes them. Protected entries that stop being used fall back to probation as others are promoted.

    >>> store = SegmentedLRU(max_bytes=12, protected_share=0.5)
    >>> store.put("a", "a", nbytes=4); _ = store.get("a")      # asked for again: protected
    >>> for key in "bcde":                                       # a scan of new entries
    ...     store.put(key, key, nbytes=4)
    >>> [k for k in "abcde" if k in store]
    ['a', 'd', 'e']
    """

    def __init__(self, max_bytes: int, protected_share: float = 0.8,
                 digests_of: Callable[[Hashable], Iterable[str]] | None = None):
        super().__init__(max_bytes, digests_of)
        if not 0 <= protected_share <= 1:
            raise ValueError(f"protected_share must be in [0, 1], got {protected_share}")
        self.protected_max = int(max_bytes * protected_share)
        self.protected_bytes = 0
        self._protected: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()  # self._items is probation

    def __contains__(self, key: Hashable) -> bool:
        return key in self._protected or key in self._items

    def __len__(self) -> int:
        return len(self._protected) + len(self._items)

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key in self._protected:
            self._protected.move_to_end(key)
            return self._protected[key][0]
        if key not in self._items:
            return default
        value, size = self._items.pop(key)
        self._protected[key] = (value, size)
        self.protected_bytes += size
        while self.protected_bytes > self.protected_max and self._protected:
            old, (old_value, old_size) = self._protected.popitem(last=False)
            self.protected_bytes -= old_size
            self._items[old] = (old_value, old_size)
        return value

    def keys(self) -> list:
        """The keys held: protected's, then probation's, each least recently used first."""
        return [*self._protected, *self._items]

    def touch(self, key: Hashable) -> int | None:
        if key in self._protected:
            self._protected.move_to_end(key)
            return self._protected[key][1]
        return super().touch(key)

    def _discard(self, key: Hashable) -> None:
        if key in self._protected:
            old = self._protected.pop(key)[1]
            self.nbytes, self.protected_bytes = self.nbytes - old, self.protected_bytes - old
        super()._discard(key)

    def _evict_one(self) -> tuple[Hashable, int]:
        """Probation's least recent entry, never the entry just put; protected's once probation holds only it."""
        if len(self._items) > 1 or not self._protected:
            return super()._evict_one()
        key, (_, dropped) = self._protected.popitem(last=False)
        self.protected_bytes -= dropped
        return key, dropped

    def clear(self) -> None:
        super().clear()
        self._protected.clear()
        self.protected_bytes = 0
