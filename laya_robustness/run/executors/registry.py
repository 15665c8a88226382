"""The executors a run can name with ``--executor``: each name with the factory that makes a run's ``Executor``
from its ``run.scorers.RunScorers``, the options only it uses and what it checks of the options before the run starts.
``make_executor`` makes a run's (``executor_class`` tells what it will be); ``register_executor`` adds one. Importing
it imports neither Ray nor torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.distributed import DistributedExecutor, check_distributed
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.executors.ray_executor import RAY_OPTIONS, RayExecutor, check_ray

if TYPE_CHECKING:
    from laya_robustness.run.executors.base import Executor


@dataclass(frozen=True)
class ExecutorEntry:
    """One registered executor: ``factory(run_scorers)`` makes a run's; ``options``, the flags only it uses (given
    with another executor, each is a usage error); ``check(values, xdist_workers)``, what it needs of the parsed
    option values and of xdist (a ``UsageError`` otherwise), or None."""

    factory: Callable[[Any], Executor]  # the run's RunScorers -> its executor
    options: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any], object], None] | None = None


#: ``--executor`` name -> its entry, in the order registered (the first is the default).
EXECUTORS: dict[str, ExecutorEntry] = {}
#: The executor every rank of a ``torch.distributed`` world runs a run with, each its share: what the training
#: callback gates with under distributed training.
DISTRIBUTED = "distributed"


def register_executor(name: str, factory: Callable[[Any], Executor], options: tuple[str, ...] = (),
                      check: Callable[[Mapping[str, Any], object], None] | None = None) -> None:
    """Let ``--executor name`` make a run's executor with ``factory(run_scorers)`` (see ``ExecutorEntry``)."""
    EXECUTORS[name] = ExecutorEntry(factory, tuple(options), check)


def unregister_executor(name: str) -> None:
    """Forget a registered executor (nothing happens for a name not registered)."""
    EXECUTORS.pop(name, None)


def executor_names() -> tuple[str, ...]:
    """The names ``--executor`` takes."""
    return tuple(EXECUTORS)


def executor_entry(name: str) -> ExecutorEntry:
    """The entry of ``name``; an unknown name is a usage error naming ``--executor``."""
    try:
        return EXECUTORS[name]
    except KeyError:
        raise UsageError(f"--executor: {name!r} is not one of {', '.join(EXECUTORS)}", "--executor") from None


def executor_class(name: object) -> Any:
    """What ``--executor name`` makes a run's executor with (its ``base.Executor`` class), to ask what it declares
    before the run is made (``world()``); None for a name not registered (the options refuse it, naming
    ``--executor``)."""
    entry = EXECUTORS.get(name) if isinstance(name, str) else None
    return None if entry is None else entry.factory


def make_executor(name: str, run_scorers) -> Executor:
    """The executor ``--executor name`` gives the run of ``run_scorers`` (its ``run.scorers.RunScorers``)."""
    return executor_entry(name).factory(run_scorers)


register_executor("local", LocalExecutor)
register_executor("ray", RayExecutor, options=RAY_OPTIONS, check=check_ray)
register_executor(DISTRIBUTED, DistributedExecutor, check=check_distributed)
