"""Report files written atomically with the user's file mode (one file, or a set of them all or none), folders made
whole beside their final name and swapped in (``staged_folder``), and names made safe for a file system.

The one writer of every file the gate and its commands write: a target that exists and is not a regular file (a
device such as ``/dev/null``, a FIFO, a socket, a folder) or is a symbolic link is refused (``NotAFile``) and left
as it is, never replaced by a file (nor a folder's by a folder).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping


def file_safe(text: str) -> str:
    """``text`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_``.

    >>> file_safe("cuda:1/dual")
    'cuda_1_dual'
    """
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


#: What a target that is not a regular file or folder is, by its file type.
KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
         (stat.S_ISREG, "a regular file"))


class NotAFile(OSError):
    """A target to write that exists and is not what is written there (see the module doc): a usage error naming it."""


def refuse_other(path: Path, folder: bool = False) -> None:
    """``NotAFile`` when ``path`` exists and is a symbolic link or not a regular file (not a folder, with ``folder``),
    saying what it is; nothing when it does not exist."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISLNK(mode) and (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
        return
    kind = next((name for test, name in KINDS if test(mode)), "of another file type")
    want = "a folder" if folder else "a regular file"
    raise NotAFile(f"{path} is {kind}, not {want}: refused, it is left as it is and nothing is written to it; give "
                   f"a path that is {want} or does not exist yet")


def _umask() -> int:
    """The process's umask: read from ``/proc`` where there is one (setting it to read it back would, for that
    moment, give the files another thread creates mode 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _stage(path: Path, data: bytes | str) -> Path:
    """``data`` in a temporary file beside ``path``, flushed to disk, with the mode a plain ``open`` would give (0666
    less the umask), not the private mode of a temporary file. A failure names ``path`` and leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk names no file: name the one written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return Path(tmp)


def write_all(files: Mapping[Path, bytes | str]) -> list[Path]:
    """Write every file of ``files`` or none: each is staged beside its path first (see ``_stage``), and only once
    all are staged are they renamed into place, so a full disk or an unwritable folder leaves every earlier
    file as it was. A target that is not a regular file is refused first (``refuse_other``), none written. Returns the
    paths written."""
    for path in files:
        refuse_other(Path(path))
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            staged.append((_stage(Path(path), data), Path(path)))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    return [path for _, path in staged]


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in the same folder, flushed to disk,
    and a rename, so a reader never sees half a file (``write_all`` of one file)."""
    write_all({Path(path): data})


@contextlib.contextmanager
def staged_folder(out: Path):
    """A folder to write ``out``'s whole content into, beside it (``.<name>.staging-*``): when the block ends without
    an error it takes ``out``'s place (the previous folder is moved aside, then removed); when it raises it is
    removed and ``out`` keeps what it had. A failure (a full disk) leaves the previous folder or, between the two
    renames, none: never half of one. An ``out`` that is a symbolic link or not a folder is refused (``refuse_other``).
    """
    out = Path(out)
    refuse_other(out, folder=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.staging-"))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it 0700; the folder gets the user's mode as any other
    previous = None
    if out.exists():
        previous = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.previous-"))
        os.replace(out, previous / out.name)
    os.replace(staging, out)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)
