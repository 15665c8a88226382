"""One run per report folder: a lock file naming the run that holds it (pid, host, start time), which a run that is
gone does not leave stuck.

A run claims ``<report-dir>/.laya-robustness.lock`` before it scores or writes there; the lock is created whole
(written beside it, then hard-linked into place), so no reader sees half of one. Every process of one run
(xdist's workers and their controller) claims it with the same run token and shares it; another run is
refused (``ReportDirInUse``, naming the holder) or waits. A lock is stale, and taken over, when its run is
gone: on this host, its pid is no longer alive (or is another process now); from another host, its lease
was not renewed for ``LEASE_S`` seconds (a run renews it every ``RENEW_S`` seconds while it holds it).
Claims and releases of one folder are serialised by an advisory lock on the folder itself where the file
system allows it, so two runs cannot both take over one stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

LOCK_NAME = ".laya-robustness.lock"
#: A lock of another host whose lease was not renewed for this many seconds is stale.
LEASE_S = 120.0
#: How often a run renews the lease of the lock it holds.
RENEW_S = 30.0


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc``), None where there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` runs on this host and is the process that started at ``start`` (a zombie is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return True  # no /proc (or it just ended): the pid answered
    return state[0] != "Z" and (start is None or state[19] == start)


@dataclass(frozen=True)
class RunIdentity:
    """Which run holds a lock: a token shared by all its processes, and its main process (pid, host, start)."""

    token: str
    pid: int
    host: str
    started: str  # UTC, ISO 8601
    pid_start: str | None = None  # the process's start in clock ticks since boot, against pid reuse

    @classmethod
    def this_process(cls) -> RunIdentity:
        now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        return cls(uuid.uuid4().hex[:12], os.getpid(), socket.gethostname(), now, _process_start(os.getpid()))

    @classmethod
    def parse(cls, data: dict) -> RunIdentity:
        return cls(str(data["token"]), int(data["pid"]), str(data["host"]), str(data["started"]),
                   data.get("pid_start"))

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {self.started}"


#: A report folder that cannot be written for these reasons is a bad --report-dir (exit 4); others (a full disk) are 3.
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST)


class ReportDirInUse(RuntimeError):
    """Another run holds the report folder's lock."""

    def __init__(self, lock: Path, holder: RunIdentity | None):
        who = holder.describe() if holder else "a run that wrote an unreadable lock"
        super().__init__(f"{lock.parent} is in use by another run ({who}; lock {lock}): wait for it to end, "
                         "or give another --report-dir (--report-dir-wait <seconds> waits for it)")
        self.lock, self.holder = lock, holder


@dataclass(frozen=True)
class Claim:
    """The outcome of a claim: ``taken`` (created), ``joined`` (this run held it already) or ``took over`` from
    ``previous``, a run that is gone; ``waited_for``: the run it waited for, if it did."""

    how: str
    previous: RunIdentity | None = None
    waited_for: RunIdentity | None = None


def is_stale(holder: RunIdentity | None, age_s: float, host: str | None = None) -> bool:
    """Whether a lock's run is gone (see the module doc); ``age_s``: seconds since the lock was renewed.

    >>> gone = RunIdentity("t", 2 ** 22 + 1, socket.gethostname(), "2026-01-01T00:00:00Z")
    >>> is_stale(gone, age_s=0.0), is_stale(RunIdentity("t", 1, "elsewhere", "-"), age_s=5.0)
    (True, False)
    """
    if holder is None:  # unreadable: stale once its lease is over
        return age_s > LEASE_S
    if holder.host == (host or socket.gethostname()):
        return not _alive(holder.pid, holder.pid_start)
    return age_s > LEASE_S


@contextlib.contextmanager
def _serialised(folder: Path):
    """An exclusive advisory lock on the folder for the duration (none where the file system has no flock)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # e.g. a network file system without flock on folders: claims are then only create-exclusive
        yield
    finally:
        os.close(fd)  # releases the flock


def _read(lock: Path) -> tuple[bool, RunIdentity | None, float]:
    """(exists, holder or None when unreadable, seconds since it was renewed)."""
    try:
        text, age = lock.read_text(encoding="utf-8"), time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False, None, 0.0
    except (OSError, UnicodeDecodeError):
        return True, None, 0.0
    try:
        return True, RunIdentity.parse(json.loads(text)), age
    except (ValueError, KeyError, TypeError):
        return True, None, age


def _place(lock: Path, run: RunIdentity, replace: bool) -> None:
    """Write ``run`` beside ``lock`` and put it in place: a hard link (which fails if a lock is there) or, to take
    over a stale one, a rename. Where hard links are not supported, an exclusive create."""
    tmp = lock.with_name(f"{lock.name}.{run.token}.{os.getpid()}")
    tmp.write_text(json.dumps(run.as_dict(), sort_keys=True) + "\n", encoding="utf-8")
    try:
        if replace:
            os.replace(tmp, lock)
            return
        try:
            os.link(tmp, lock)
        except FileExistsError:
            raise
        except OSError:  # no hard links here
            with os.fdopen(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w") as fh:
                fh.write(tmp.read_text(encoding="utf-8"))
    finally:
        tmp.unlink(missing_ok=True)


def claim(folder: Path, run: RunIdentity, wait_s: float = 0.0, poll_s: float = 0.5,
          on_wait: Callable[[RunIdentity | None], None] = lambda holder: None) -> Claim:
    """Hold the lock of ``folder`` for ``run`` (see the module doc), waiting up to ``wait_s`` seconds for another
    run to end (``on_wait(holder)`` is called once when it starts waiting). Raises ``ReportDirInUse`` when it
    does not end in time, ``OSError`` when the folder cannot be written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    deadline, waited_for = time.monotonic() + wait_s, None
    while True:
        with _serialised(folder):
            exists, holder, age = _read(lock)
            if not exists:
                try:
                    _place(lock, run, replace=False)
                    return Claim("taken", waited_for=waited_for)
                except FileExistsError:
                    exists, holder, age = _read(lock)
            if holder is not None and holder.token == run.token:
                return Claim("joined", waited_for=waited_for)
            if is_stale(holder, age):
                _place(lock, run, replace=True)
                return Claim("took over", holder, waited_for)
        if time.monotonic() >= deadline:
            raise ReportDirInUse(lock, holder)
        if waited_for is None:
            on_wait(holder)
            waited_for = holder or RunIdentity("unknown", 0, "unknown", "unknown")
        time.sleep(poll_s)


def renew(folder: Path, run: RunIdentity) -> bool:
    """Renew the lease of ``run``'s lock of ``folder``; False when the lock is not (or no longer) ``run``'s."""
    lock = Path(folder) / LOCK_NAME
    exists, holder, _ = _read(lock)
    if not exists or holder is None or holder.token != run.token:
        return False
    with contextlib.suppress(OSError):
        os.utime(lock)
    return True


def claim_or_say_why(folder: Path, run: RunIdentity, wait_s: float = 0.0,
                     on_wait: Callable[[RunIdentity | None], None] = lambda holder: None,
                     instead: str | None = None, hint: str | None = None) -> Claim:
    """``claim``, its failures as a run's errors: another run holding ``folder`` or a folder that cannot be written is
    a ``UsageError`` about ``--report-dir`` (``instead``: what to type instead, or ``hint``), another failure of the
    file system (a full disk) a ``HarnessError``."""
    from laya_robustness.run.errors import HarnessError, UsageError

    try:
        return claim(folder, run, wait_s=wait_s, on_wait=on_wait)
    except ReportDirInUse as exc:
        raise UsageError(f"--report-dir: {exc}", "--report-dir", instead, hint) from None
    except OSError as exc:
        why = f"--report-dir: cannot write in {folder}: {exc}"
        if exc.errno in UNWRITABLE:
            raise UsageError(why, "--report-dir", hint=hint) from None
        raise HarnessError(why) from exc


def release(folder: Path, run: RunIdentity) -> bool:
    """Remove ``run``'s lock of ``folder``; another run's lock is left alone. True when one was removed."""
    folder = Path(folder)
    if not (folder / LOCK_NAME).exists():
        return False
    with _serialised(folder):
        exists, holder, _ = _read(folder / LOCK_NAME)
        if not exists or holder is None or holder.token != run.token:
            return False
        (folder / LOCK_NAME).unlink(missing_ok=True)
        return True


class Lease:
    """Renews ``run``'s lock of ``folder`` every ``every`` seconds from a daemon thread until ``stop``."""

    def __init__(self, folder: Path, run: RunIdentity, every: float = RENEW_S):
        self.folder, self.run, self.every = Path(folder), run, every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="laya-robustness-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stopped.wait(self.every):
            renew(self.folder, self.run)

    def stop(self) -> None:
        self._stopped.set()


class FolderHold:
    """A run's hold on its report folder (``folder``, for ``run``; ``wait_s``: how long to wait for another run
    there; ``worker``: an xdist worker's id, None for the run's main process)."""

    def __init__(self, folder: Path, run: RunIdentity, wait_s: float, worker: str | None = None):
        self.folder, self.run, self.wait_s, self.worker = Path(folder), run, wait_s, worker
        self._lease: Lease | None = None

    def claim(self, on_wait=None) -> list[str]:
        """Hold (or check that this run still holds) the lock, renewing its lease while the process runs;
        ``on_wait(holder)`` is told when another run holds it and this one waits. What claiming did, as notes (a
        wait, a stale lock taken over). Raises ``UsageError`` (another run holds it, or it cannot be written) or
        ``HarnessError`` (a full disk)."""
        held = claim_or_say_why(self.folder, self.run, wait_s=self.wait_s, on_wait=on_wait,
                                instead=f"--report-dir {self.folder}-2 (or wait for it: --report-dir-wait 600)")
        notes = []
        if held.waited_for is not None:
            notes.append(f"waited for the run that held {self.folder} to end ({held.waited_for.describe()})")
        if held.previous is not None:
            notes.append(f"took over the lock of {self.folder} from a run that is gone ({held.previous.describe()})")
        if self._lease is None:
            self._lease = Lease(self.folder, self.run)
        return notes

    def release(self) -> None:
        """Stop renewing the lock; the run's main process (not an xdist worker) also removes it."""
        if self._lease is not None:
            self._lease.stop()
        if self.worker is None:
            release(self.folder, self.run)
