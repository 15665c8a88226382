"""The threads a run's scoring leaves behind."""

import threading

from laya_robustness.run.pipeline.prefetch import THREAD_NAME


def prefetch_threads_left() -> list[str]:
    """The names of the prefetch threads still alive (none, once scoring has ended however it ended)."""
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]
