"""Progress while the gate scores rows: a tqdm bar per family and set on a terminal, one line each in a log.

``scoring_progress(config, device, label, n_rows)`` gives the session a tracker with ``update(n)``
(called after each scored chunk) and ``close()``. It shows only with ``-v``: at default verbosity pytest's own
progress stays one line per test file (a line per scored cell would break it, and pytest would name the file
again after each). Nothing is shown on an xdist worker either (the controller prints the results), without
pytest's terminal, or for no rows (a family that builds no variant of a set). On a terminal a tqdm bar counts rows and rows/s; otherwise (a CI
log) one line per family and set is written when it is done, no carriage returns. Output goes
through pytest's terminal writer with capturing suspended, as live logging does.

>>> lines = []
>>> tracker = LineProgress(lines.append, "text/vsr (cpu)", 40, clock=iter([0.0, 2.0]).__next__)
>>> tracker.update(40); tracker.close()
>>> lines
['scored text/vsr (cpu): 40 rows in 2.0 s, 20 rows/s']
"""

from __future__ import annotations

import time
from typing import Callable


class Quiet:
    """Shows nothing."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


class LineProgress:
    """One line when a family/set is done: rows, seconds, rows/s (for logs: no carriage returns)."""

    def __init__(self, write_line: Callable[[str], None], label: str, total: int,
                 clock: Callable[[], float] = time.perf_counter):
        self.write_line, self.label, self.total, self.clock = write_line, label, total, clock
        self.done, self.start = 0, clock()

    def update(self, n: int) -> None:
        self.done += n

    def close(self) -> None:
        seconds = self.clock() - self.start
        rate = f"{self.done / seconds:.0f} rows/s" if seconds > 0 else "- rows/s"
        self.write_line(f"scored {self.label}: {self.done} rows in {seconds:.1f} s, {rate}")


class _TerminalFile:
    """A file for tqdm that writes through pytest's terminal writer with capturing suspended."""

    def __init__(self, reporter, capture):
        self.reporter, self.capture = reporter, capture

    def _suspended(self):
        import contextlib

        return self.capture.global_and_fixture_disabled() if self.capture else contextlib.nullcontext()

    def write(self, text: str) -> None:
        with self._suspended():
            self.reporter.write(text, flush=True)

    def flush(self) -> None:
        with self._suspended():
            self.reporter.flush()


class BarProgress:
    """A tqdm bar (rows, rows/s) on the terminal, left in place when done."""

    def __init__(self, file: _TerminalFile, label: str, total: int):
        from tqdm import tqdm

        with file._suspended():
            file.reporter.ensure_newline()
        self.bar = tqdm(total=total, desc=f"scoring {label}", unit="rows", file=file, leave=True, mininterval=0.5,
                        dynamic_ncols=False, ncols=100)

    def update(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def scoring_progress(config, device: str, label: str, total: int):
    """The tracker of scoring ``total`` rows of ``label`` (family/dataset) on ``device`` in this pytest run."""
    if hasattr(config, "workerinput") or config.getoption("verbose", 0) < 1 or total == 0:
        return Quiet()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return Quiet()
    file = _TerminalFile(reporter, config.pluginmanager.get_plugin("capturemanager"))
    label = f"{label} ({device})"
    if reporter.isatty():
        return BarProgress(file, label, total)

    def write_line(text: str) -> None:
        with file._suspended():
            reporter.ensure_newline()
            reporter.write_line(text)

    return LineProgress(write_line, label, total)
