"""The threads a run's scoring leaves behind."""

import threading

from laya_robustness.run.pipeline.prefetch import THREAD_NAME

#: The prefetch threads alive when the current test started (``note_threads_alive``): not the test's.
_BEFORE: set = set()


def note_threads_alive() -> None:
    """Before each test (``helpers.fixtures``): the prefetch threads already alive belong to no scoring of this
    test (a gate run in the same process, as an xdist worker runs the gate's tests beside these, keeps its stream's
    thread until the run ends)."""
    _BEFORE.clear()
    _BEFORE.update(t for t in threading.enumerate() if t.name.startswith(THREAD_NAME))


def prefetch_threads_left() -> list[str]:
    """The names of the prefetch threads the test started that are still alive (none, once scoring has ended
    however it ended)."""
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_NAME) and t not in _BEFORE]
