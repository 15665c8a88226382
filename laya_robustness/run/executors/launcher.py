"""A launcher ending a rank while it gates: the evaluation is noted as not finished before the rank ends.

When a rank dies, ``torchrun`` (and most launchers) ends the others with SIGTERM, whose default action ends a process
at once: a rank gating at that moment would leave no word of why its evaluation stopped. ``ended_by_launcher`` turns
SIGTERM into ``Terminated`` while the gate runs (in the main thread only, where Python receives signals), so the
caller can note why, and delivers the signal again once the block is left, to the handler it replaced: the rank
then ends as the launcher asked. Once the gate is over (``hold()``, or a first SIGTERM), a SIGTERM is held until then,
so the note is written whole.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator


class Terminated(BaseException):
    """SIGTERM reached this rank while it gated (a ``BaseException``, as ``KeyboardInterrupt``: no ``except
    Exception`` in the gate holds it)."""


@contextlib.contextmanager
def ended_by_launcher(step: int) -> Iterator[Callable[[], None]]:
    """SIGTERM raised as ``Terminated`` (naming ``step``) inside the block until the ``hold()`` it gives is called,
    held after, and delivered again when the block is left (see the module doc); nothing changes outside the main
    thread."""
    received: list[int] = []
    held = [False]

    def hold() -> None:
        held[0] = True

    if threading.current_thread() is not threading.main_thread():
        yield hold
        return

    def terminated(signum, frame):
        received.append(signum)
        if not held[0]:
            held[0] = True
            raise Terminated(f"SIGTERM reached this rank while the gate ran at step {step}: the launcher is ending "
                             "the job (another rank ended: killed, or failed)")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield hold
    finally:
        signal.signal(signal.SIGTERM, previous)
        if received:
            signal.raise_signal(signal.SIGTERM)
