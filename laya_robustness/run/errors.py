"""What can go wrong in a run besides a crossed limit, and the exit status each gives: a broken harness (a model
that cannot load, a crash while scoring, a server or cluster that fails: exit 3) and bad input or options
(exit 4)."""

from __future__ import annotations

#: pytest's exit statuses the gate promises: 1 a limit was crossed, 3 the harness broke, 4 a usage error.
EXIT_LIMIT_CROSSED, EXIT_HARNESS, EXIT_USAGE = 1, 3, 4


class HarnessError(RuntimeError):
    """The harness broke (a model that cannot load, a crash while scoring): not a gate failure (exit 3)."""

