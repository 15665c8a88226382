"""glibc's malloc told to keep freed memory for reuse, so large CPU tensors do not page-fault anew each forward.

glibc hands every block of 32 MiB or more (less, past its moving threshold) straight back to the system
when it is freed, and maps it anew on the next request: each page of it faults again when it is first
written. A CPU forward over photo-sized inputs allocates such blocks by the dozen (eager attention
weights, the vision encoder's activations), so the kernel's page-fault work grows with every row.
:func:`keep_freed_memory` asks malloc to serve every block from its heap (``M_MMAP_MAX`` 0) and never
to trim the heap (``M_TRIM_THRESHOLD`` at its maximum): freed blocks are reused, and the process keeps
its peak resident size until it exits.

Measured on 2 cores: 24 rows on 12 photos of 1024 x 768 scored through orig, option_order, image and
text with a tiny Idefics3 that has SmolVLM-256M's tiling: 54.4 s -> 26.2 s, system time 50.4 s -> 2.9 s,
minor page faults 32.2M -> 0.84M, peak resident size 3.46 -> 4.71 GiB.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
INT_MAX = 2**31 - 1


def keep_freed_memory() -> bool:
    """Set malloc to keep and reuse freed memory in this process; False where the C library is not glibc
    (the setting is glibc's) or refuses it."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1
