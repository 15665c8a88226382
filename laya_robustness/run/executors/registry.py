"""The executors a run can name with ``--executor``: each name with the factory that makes a run's ``Executor``
from the run's scorers (``base.ScorerSource``), the options only it uses and what it checks of the options before the
run starts. ``make_executor`` makes a run's (``executor_class`` tells what it will be); ``register_executor`` adds one,
and so does a ``laya_robustness.executors`` entry point of an installed package. Importing it imports neither Ray nor
torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from laya_robustness.registry import Registry, UnknownName, origin_of
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.distributed import DistributedExecutor, check_distributed
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.executors.ray_executor import RAY_OPTIONS, RayExecutor, check_ray

if TYPE_CHECKING:
    from laya_robustness.run.executors.base import Executor, ScorerSource


@dataclass(frozen=True)
class ExecutorEntry:
    """One registered executor: ``factory(scorers)`` makes a run's; ``options``, the flags only it uses (given
    with another executor, each is a usage error); ``check(values, xdist_workers)``, what it needs of the parsed
    option values and of xdist (a ``UsageError`` otherwise), or None."""

    factory: Callable[[Any], Executor]  # the run's ScorerSource -> its executor
    options: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any], object], None] | None = None


def _as_entry(name: str, obj: Any) -> ExecutorEntry:
    """The entry an entry point names: an ``ExecutorEntry``, or the factory (an ``Executor`` class) of one that uses
    no option of its own."""
    if isinstance(obj, ExecutorEntry):
        return obj
    if not callable(obj):
        raise TypeError(f"{obj!r} is neither an ExecutorEntry nor an executor factory")
    return ExecutorEntry(obj)


#: ``--executor`` name -> its entry (``registry.Registry``), in the order registered (the first is the default), then
#: those of the ``laya_robustness.executors`` entry points of installed packages.
REGISTRY: Registry[ExecutorEntry] = Registry("executor", adapt=_as_entry)
#: The same, as a mapping: ``--executor`` name -> its entry (an entry point not loaded yet: the reference it waits as).
EXECUTORS = REGISTRY.by_name
ENTRY_POINT_GROUP = "laya_robustness.executors"
#: The executor every rank of a ``torch.distributed`` world runs a run with, each its share: what the training
#: callback gates with under distributed training.
DISTRIBUTED = "distributed"


def register_executor(name: str, factory: Callable[[Any], Executor], options: tuple[str, ...] = (),
                      check: Callable[[Mapping[str, Any], object], None] | None = None) -> None:
    """Let ``--executor name`` make a run's executor with ``factory(scorers)`` (see ``ExecutorEntry``); a name
    registered already raises ``registry.DuplicateName``."""
    REGISTRY.add(name, ExecutorEntry(factory, tuple(options), check), origin=origin_of(factory))


def unregister_executor(name: str) -> None:
    """Forget a registered executor (nothing happens for a name not registered)."""
    REGISTRY.discard(name)


def executor_names() -> tuple[str, ...]:
    """The names ``--executor`` takes: those registered and those of the entry points that load (one that does not
    is left out with a ``registry.BrokenEntryWarning`` naming it)."""
    REGISTRY.load_entry_points(ENTRY_POINT_GROUP)
    return tuple(name for name, _ in REGISTRY.entries())


def executor_entry(name: str) -> ExecutorEntry:
    """The entry of ``name``; an unknown name is a usage error naming ``--executor``, one whose entry point does not
    load ``registry.BrokenEntry`` naming it."""
    REGISTRY.load_entry_points(ENTRY_POINT_GROUP)
    try:
        return REGISTRY.get(name)
    except UnknownName:
        raise UsageError(f"--executor: {name!r} is not one of {', '.join(executor_names())}", "--executor") from None


def executor_class(name: object) -> Any:
    """What ``--executor name`` makes a run's executor with (its ``base.Executor`` class), to ask what it declares
    before the run is made (``world()``); None for a name not registered (the options refuse it, naming
    ``--executor``)."""
    REGISTRY.load_entry_points(ENTRY_POINT_GROUP)
    entry = REGISTRY.find(name)
    return None if entry is None else entry.factory


def make_executor(name: str, scorers: ScorerSource) -> Executor:
    """The executor ``--executor name`` gives the run whose scorers are ``scorers`` (its ``run.scorers.ScorerPool``,
    as ``base.ScorerSource``)."""
    return executor_entry(name).factory(scorers)


register_executor("local", LocalExecutor)
register_executor("ray", RayExecutor, options=RAY_OPTIONS, check=check_ray)
register_executor(DISTRIBUTED, DistributedExecutor, check=check_distributed)
