"""Report files written atomically with the user's file mode, and names made safe for a file system."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def file_safe(text: str) -> str:
    """``text`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_``.

    >>> file_safe("cuda:1/dual")
    'cuda_1_dual'
    """
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in the same folder, flushed to disk,
    and a rename, so a reader never sees half a file. The file gets the mode a plain ``open`` would give
    (0666 less the umask), not the private mode of a temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
