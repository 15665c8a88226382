"""glibc's malloc told to keep freed memory for reuse, so large CPU tensors do not page-fault anew each forward.

glibc hands every block of 32 MiB or more (less, past its moving threshold) straight back to the system
when it is freed, and maps it anew on the next request: each page of it faults again when it is first
written. A CPU forward over photo-sized inputs allocates such blocks by the dozen (eager attention
weights, the vision encoder's activations), so the kernel's page-fault work grows with every row.
:func:`keep_freed_memory` asks malloc to serve every block from its heap (``M_MMAP_MAX`` 0) and never
to trim the heap (``M_TRIM_THRESHOLD`` at its maximum): freed blocks are reused. Kept for good, the freed
memory would only grow: a heap with free blocks too small or too scattered for the next large tensor grows
anew, and a longer run draws more such moments. That happens where images are built, scored and let go
(blocks of every size come and go); a chunk of text-side rows reuses the blocks the one before it freed. So
the run gives the freed memory back (:func:`give_back_freed_memory`, glibc's ``malloc_trim``) after a
scoring chunk once the images let go since the last give-back add up to half the image store's bound
(``--image-cache-mb``; decoded bytes), and at each cell's end: the resident size follows what a chunk or two
needs, not how many rows the run has. Each give-back costs the next chunk its page faults again, which is
why it is not done after every chunk.

What this saves and why the give-back comes when it does: docs/performance.md.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
INT_MAX = 2**31 - 1


def _glibc(name: str, argtypes: list):
    """The process's own C library function ``name`` (an int result), or None where that library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


def keep_freed_memory() -> bool:
    """Set malloc to keep and reuse freed memory in this process; False where the C library is not glibc
    (the setting is glibc's) or refuses it."""
    mallopt = _glibc("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1


def give_back_freed_memory() -> bool:
    """Give the free memory malloc holds back to the system (glibc's ``malloc_trim(0)``: the heap's free pages
    are released, its blocks stay where they are for reuse); False where the C library is not glibc."""
    malloc_trim = _glibc("malloc_trim", [ctypes.c_size_t])
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True
