"""The next chunks made ready while the current one is scored, as a DataLoader's worker prefetches: each chunk's
pixels (images decoded, variant images built again) are made on a thread of its own, at most ``chunks_ahead()``
chunks before the one being scored, so the device does not wait for the CPU between chunks (in a local stream of
cells, the next cell's rows are built on another, one cell ahead: ``run.executors.local_stream``).

What is held at once is the chunk being scored and the chunks made ahead, whatever the number of chunks. The
chunks come in order, each as it would be made when asked for, so the records are the same. A chunk whose
making raised raises when it is asked for, after every chunk before it; a caller that stops early (an exception,
Ctrl-C, the generator closed) cancels the chunks not started and waits for the one being made: no thread is left.

>>> list(made_ahead((i * i for i in range(5)), ahead=2))
[0, 1, 4, 9, 16]
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

from laya_robustness.run.errors import UsageError

#: Chunks made ahead of the one being scored, unless ``LAYA_PREFETCH_CHUNKS`` says otherwise (0: each chunk is
#: made when it is asked for; measured: docs/performance.md).
PREFETCH_CHUNKS = 1
#: The name of the thread that makes chunks ahead (``threading.enumerate`` shows it while a cell is scored); a local
#: stream's thread that builds the next cell's rows is ``ROWS_THREAD_NAME``.
THREAD_NAME = "laya-prefetch"
ROWS_THREAD_NAME = f"{THREAD_NAME}-rows"

T = TypeVar("T")
_END = object()  # what the thread makes once the items are over


def chunks_ahead() -> int:
    """How many chunks are made ahead (``LAYA_PREFETCH_CHUNKS``, else ``PREFETCH_CHUNKS``); a value that is no
    whole number >= 0 is a ``UsageError`` naming the variable."""
    text = os.environ.get("LAYA_PREFETCH_CHUNKS")
    if text is None:
        return PREFETCH_CHUNKS
    if not text.strip().isdigit():
        raise UsageError(f"LAYA_PREFETCH_CHUNKS: {text!r} is not a whole number of chunks (0 or more)",
                         hint="set LAYA_PREFETCH_CHUNKS=1, or unset it")
    return int(text)


def made_ahead(items: Iterable[T], ahead: int | None = None, dropped: Callable[[T], None] | None = None,
               name: str = THREAD_NAME) -> Iterator[T]:
    """``items`` in order, each made (the iterator advanced) on a thread of its own (named ``name``) up to ``ahead``
    items (default ``chunks_ahead()``) before it is asked for; with ``ahead`` 0, each made when it is asked for,
    here. Stopped early, the items made and never handed over are given to ``dropped`` (here, once the thread has
    ended)."""
    ahead = chunks_ahead() if ahead is None else ahead
    items = iter(items)
    if ahead < 1:
        yield from items
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    pending: deque = deque()
    try:
        while True:
            while len(pending) <= ahead:
                pending.append(pool.submit(next, items, _END))
            item = pending.popleft().result()
            if item is _END:
                return
            yield item
            del item  # a chunk handed over is the caller's alone to hold
    finally:
        _stop(pool, pending, items, dropped)


def _stop(pool: ThreadPoolExecutor, pending: deque, items: Iterator, dropped) -> None:
    """End the thread (the item being made is waited for), close ``items`` and hand what was made to ``dropped``."""
    for future in pending:
        future.cancel()
    pool.shutdown(wait=True, cancel_futures=True)
    getattr(items, "close", lambda: None)()
    for future in pending:
        if dropped is not None and not future.cancelled() and future.exception() is None:
            if future.result() is not _END:
                dropped(future.result())
