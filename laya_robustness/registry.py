"""One registry type for everything the harness finds by name: families, executors, scorers, served protocols.

A :class:`Registry` maps names to entries in the order they were added. An entry may wait as a reference, loaded
on its first ``get``: a ``"module:object"`` string, or an entry point of an installed package
(:meth:`Registry.load_entry_points`). An entry point may name the entry (``name = module:object``) or a module that
adds its entries when it is imported (``name = module``). A reference that fails to load is a :class:`BrokenEntry`
naming it; listing the entries (:meth:`Registry.entries`) leaves it out with a :class:`BrokenEntryWarning`, so a
broken plug-in stops only the runs that ask for it.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import sys
import warnings
from types import ModuleType
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class DuplicateName(ValueError):
    """A name added twice; the message names both entries."""


class UnknownName(KeyError):
    """A name nothing added: the message names it, the close matches and the known names."""

    def __init__(self, message: str, name: str, close: tuple[str, ...], known: tuple[str, ...]):
        super().__init__(message)
        self.message, self.name, self.close, self.known = message, name, close, known


class BrokenEntry(ImportError):
    """A reference (``module:object`` or an entry point) that could not be loaded; the message names it."""


class BrokenEntryWarning(UserWarning):
    """A broken reference left out of a listing of the entries."""


def load_object(ref: str) -> Any:
    """The object ``"module:object"`` names (``object`` may be dotted; ``"module"`` alone: the module).

    ImportError where the module cannot be imported, AttributeError where it lacks the object."""
    module_name, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class _Pending:
    """A reference waiting to be loaded: a ``module:object`` string or an entry point."""

    def __init__(self, ref: Any, origin: str):
        self.ref, self.origin = ref, origin
        self.loading = False
        self.error: BrokenEntry | None = None

    def load(self) -> Any:
        return load_object(self.ref) if isinstance(self.ref, str) else self.ref.load()


@functools.lru_cache(maxsize=4)
def _entry_points(path: tuple[str, ...]) -> Any:
    """Every entry point of the packages installed on ``path`` (``sys.path``), read once for all the groups."""
    from importlib.metadata import entry_points

    return entry_points()


def _entry_point_origin(entry: Any) -> str:
    dist = getattr(entry, "dist", None)
    package = f", package {dist.name}" if dist is not None and getattr(dist, "name", None) else ""
    return f"entry point '{entry.name} = {entry.value}' (group {entry.group}{package})"


def origin_of(obj: Any) -> str:
    """Where ``obj`` comes from, for messages: ``module.qualname`` of a function or class, else its type's name."""
    name = getattr(obj, "__qualname__", None)
    return f"{obj.__module__}.{name}" if name and getattr(obj, "__module__", None) else type(obj).__qualname__


class Registry(Generic[T]):
    """Name -> entry, in the order added (see the module doc).

    ``kind`` names an entry in messages (``unknown family 'txet'``); ``added`` is how a duplicate is told
    (``family 'text' is declared twice: ...``). ``adapt(name, obj)`` makes the entry from what a reference loads
    (a plug-in factory wrapped as the registry's entries are called, say); it may raise to refuse the object.
    """

    def __init__(self, kind: str, *, added: str = "registered", adapt: Callable[[str, Any], T] | None = None):
        self.kind, self.added, self.adapt = kind, added, adapt
        #: name -> its entry, or the reference it waits as (in the order added).
        self.by_name: dict[str, Any] = {}
        self._origins: dict[str, str] = {}
        self._groups: set[str] = set()

    def add(self, name: str, entry: T | str, origin: str | None = None) -> None:
        """Add ``entry`` under ``name`` (a ``"module:object"`` string waits until its first ``get``); ``origin`` says
        where it comes from in the message of a duplicate. A name already added raises :class:`DuplicateName`,
        unless it waits for the reference being loaded now (a module adding its own entry as it is imported)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind}: {name!r} is not a name")
        lazy = isinstance(entry, str)
        origin = origin or (f"'{entry}'" if lazy else origin_of(entry))
        existing = self.by_name.get(name)
        if name in self.by_name and not (isinstance(existing, _Pending) and existing.loading):
            raise DuplicateName(f"{self.kind} {name!r} is {self.added} twice: "
                                f"by {self._origins.get(name, origin_of(existing))} and by {origin}")
        self.by_name[name] = _Pending(entry, origin) if lazy else entry
        self._origins[name] = origin

    def discard(self, name: str) -> None:
        """Forget ``name`` (nothing happens for a name not added)."""
        self.by_name.pop(name, None)
        self._origins.pop(name, None)

    def load_entry_points(self, group: str) -> None:
        """Add each entry point of ``group`` (``importlib.metadata``) by name, waiting to be loaded; once per group.
        One whose name is taken is left out with a :class:`BrokenEntryWarning` naming both."""
        if group in self._groups:
            return
        self._groups.add(group)
        for entry in sorted(_entry_points(tuple(sys.path)).select(group=group), key=lambda e: e.name):
            origin = _entry_point_origin(entry)
            if entry.name in self.by_name:
                warnings.warn(f"{origin} is left out: {self.kind} {entry.name!r} is {self.added} already, by "
                              f"{self._origins.get(entry.name, origin_of(self.by_name[entry.name]))}",
                              BrokenEntryWarning, stacklevel=2)
                continue
            self.by_name[entry.name] = _Pending(entry, origin)
            self._origins[entry.name] = origin

    def names(self) -> tuple[str, ...]:
        """Every name, loaded or waiting (a broken reference aside), in the order added."""
        return tuple(n for n, e in self.by_name.items() if not (isinstance(e, _Pending) and e.error))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __len__(self) -> int:
        return len(self.names())

    def get(self, name: str) -> T:
        """The entry of ``name``, loaded on first use; an unknown name raises :class:`UnknownName` (after loading
        the references still waiting: a module may add entries under other names), a reference that does not
        load :class:`BrokenEntry`."""
        if name not in self.by_name:
            self._load_waiting()
        if name not in self.by_name:
            raise self.unknown(name)
        entry = self.by_name[name]
        return self._load(name, entry) if isinstance(entry, _Pending) else entry

    def find(self, name: object) -> T | None:
        """The entry of ``name``, or None where nothing is added under it or its reference does not load."""
        entry = self.by_name.get(name) if isinstance(name, str) else None
        if entry is None and isinstance(name, str):
            self._load_waiting()
            entry = self.by_name.get(name)
        if not isinstance(entry, _Pending):
            return entry
        try:
            return self._load(name, entry)
        except (UnknownName, BrokenEntry):
            return None

    def entries(self) -> tuple[tuple[str, T], ...]:
        """(name, entry) for every entry, each reference loaded, in the order added; a broken reference is left
        out with a :class:`BrokenEntryWarning` (the first time it breaks)."""
        self._load_waiting()
        return tuple((n, e) for n, e in self.by_name.items() if not isinstance(e, _Pending))

    def unknown(self, name: str) -> UnknownName:
        """The error of an unknown ``name``: ``unknown <kind> 'name'; did you mean ...? (known: ...)``."""
        known = tuple(sorted(self.names()))
        close = tuple(difflib.get_close_matches(name, known, n=3)) if isinstance(name, str) else ()
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return UnknownName(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(known)})", name, close, known)

    def _load_waiting(self) -> None:
        for name, entry in list(self.by_name.items()):
            if isinstance(entry, _Pending) and entry.error is None and not entry.loading:
                try:
                    self._load(name, entry)
                except BrokenEntry as exc:
                    warnings.warn(f"{exc} (left out)", BrokenEntryWarning, stacklevel=3)

    def _load(self, name: str, pending: _Pending) -> T:
        if pending.error is not None:
            raise pending.error
        pending.loading = True
        try:
            obj = pending.load()
            resolved = self.by_name.get(name)
            if resolved is not pending:  # the module added its entry as it was imported
                return resolved
            if isinstance(obj, ModuleType):  # a module that added its entries under other names
                self.discard(name)
                raise self.unknown(name)
            entry = self.adapt(name, obj) if self.adapt is not None else obj
        except UnknownName:
            raise
        except Exception as exc:
            pending.error = BrokenEntry(f"{self.kind} {name!r}: {pending.origin} cannot be loaded: "
                                        f"{type(exc).__name__}: {exc}")
            raise pending.error from exc
        finally:
            pending.loading = False
        self.by_name[name] = entry
        return entry
