"""What can go wrong in a run besides a crossed limit, and the exit status each gives: a broken harness (a model
that cannot load, a crash while scoring, a server or cluster that fails: exit 3) and bad input or options
(exit 4)."""

from __future__ import annotations

#: pytest's exit statuses the gate promises: 1 a limit was crossed, 3 the harness broke, 4 a usage error.
EXIT_LIMIT_CROSSED, EXIT_HARNESS, EXIT_USAGE = 1, 3, 4


class HarnessError(RuntimeError):
    """The harness broke (a model that cannot load, a crash while scoring): not a gate failure (exit 3).

    ``stops_run``: nothing more can be scored (a served model's endpoint is unreachable), so the run stops.
    """

    def __init__(self, message: str, stops_run: bool = False):
        super().__init__(message)
        self.stops_run = stops_run


def stops_run(exc: BaseException | None) -> bool:
    """Whether an exception, or one it was raised from, says nothing more can be scored (``stops_run``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if getattr(exc, "stops_run", False):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
