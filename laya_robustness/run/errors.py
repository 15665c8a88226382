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


class UsageError(ValueError):
    """A bad option, argument or input file (exit 4), found before any work starts.

    ``message`` names the option (``--seed: 'abc' is not an integer``) or the file, line and field; ``option`` is
    the flag it is about (None: none); ``instead`` what to type instead (``--seed 0``), or ``hint`` another line
    of advice. The pytest plugin prints it as the option's usage error, ``run_gate`` as the argument's
    (:meth:`for_arguments`).
    """

    def __init__(self, message: str, option: str | None = None, instead: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.option, self.instead, self.hint = message, option, instead, hint

    def for_arguments(self) -> "UsageError":
        """The same error as ``run_gate`` reports it: arguments (``rows_per_set=2``) instead of flags
        (``--rows-per-set 2``).

        >>> print(UsageError("--seed: 'abc' is not an integer", "--seed", "--seed 0").for_arguments())
        seed: 'abc' is not an integer
          pass instead, e.g.: run_gate(seed=0)
        """
        message = _as_arguments(self.message) if self.option else self.message
        extra = f"\n  pass instead, e.g.: run_gate({_call_arguments(self.instead)})" if self.instead else \
            (f"\n  {self.hint}" if self.hint else "")
        return UsageError(message + extra, self.option, self.instead, self.hint)


def _flag_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _as_arguments(text: str) -> str:
    """``--rows-per-set`` -> ``rows_per_set`` wherever a flag is named in ``text``."""
    import re

    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)", lambda m: _flag_name(m.group(1)), text)


def _call_arguments(typed: str) -> str:
    """``--executor ray --ray-actors 2`` -> ``executor='ray', ray_actors=2``; a switch alone is True.

    >>> _call_arguments("--executor ray --ray-actors 2 --resume")
    "executor='ray', ray_actors=2, resume=True"
    """
    parts, words = [], typed.split()
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        text = "True" if value is None else value if value.isdigit() else repr(value)
        parts.append(f"{_flag_name(word)}={text}")
    return ", ".join(parts)


def stops_run(exc: BaseException | None) -> bool:
    """Whether an exception, or one it was raised from, says nothing more can be scored (``stops_run``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if getattr(exc, "stops_run", False):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
