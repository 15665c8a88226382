"""Content keys for images and a least-recently-used store bounded by bytes (processed pixels, vision features).

Example::

    >>> from PIL import Image
    >>> a, b = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "red")
    >>> image_digest(a) == image_digest(b)          # same pixels, size and mode: same key
    True
    >>> store = ByteLRU(max_bytes=10)
    >>> store.put("x", "payload", nbytes=6); store.put("y", "other", nbytes=6)
    >>> "x" in store, "y" in store                  # x was evicted to stay within 10 bytes
    (False, True)
"""

from __future__ import annotations

import hashlib
import weakref
from collections import OrderedDict
from typing import Any, Hashable

#: Default bounds of the scorer's stores; vision features of a 512 px SmolVLM tile are 64 x 576 fp32 = 147 KB.
DEFAULT_FEATURE_CACHE_BYTES = 1 << 30
DEFAULT_PIXEL_CACHE_BYTES = 1 << 30

_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}


def image_digest(image) -> str:
    """sha256 over the image's mode, size and raw pixel bytes (memoised per live image object)."""
    key = id(image)
    known = _DIGESTS.get(key)
    if known is not None and known[0]() is image:
        return known[1]
    h = hashlib.sha256(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    h.update(image.tobytes())
    digest = h.hexdigest()
    try:
        _DIGESTS[key] = (weakref.ref(image, lambda _, key=key: _DIGESTS.pop(key, None)), digest)
    except TypeError:  # an object without weak references: no memo
        pass
    return digest


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

    An entry larger than ``max_bytes`` is not stored at all (``put`` is then a no-op).
    """

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evictions = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

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
        if key in self._items:
            self.nbytes -= self._items.pop(key)[1]
        if size > self.max_bytes:
            return
        self._items[key] = (value, size)
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.nbytes -= dropped
            self.evictions += 1

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0
