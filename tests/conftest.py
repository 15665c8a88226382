"""The project's own tests: the fixtures of ``helpers.fixtures`` given to every test, and in-process pytester runs
that keep the libraries imported."""

import sys
from pathlib import Path

import _pytest.pytester

from helpers.paths import ROOT

pytest_plugins = ["helpers.fixtures"]

_INSTALLED = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
_PROJECT_PACKAGE = str(ROOT / "laya_robustness")


def _installed_or_project(name: str) -> bool:
    """Whether ``sys.modules[name]`` is a library, the standard library or the project's package (not a module
    that an in-process pytester run wrote into its temporary folder)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if path is None:
        return getattr(module, "__path__", None) is None  # a built-in module; a namespace package may be a test's
    path = str(Path(path).resolve())
    return path.startswith(_INSTALLED) or path.startswith(_PROJECT_PACKAGE)


class _KeepLibraries(_pytest.pytester.SysModulesSnapshot):
    """pytester forgets every module imported during an in-process run (``pytester.runpytest``), so that the
    next run re-imports the test files it wrote. Forgetting libraries too breaks the rest of the session: a
    re-imported ``transformers`` model module gives classes that ``isinstance`` no longer matches, and a
    re-imported ``datasets`` registers its pyarrow extension types a second time (``ArrowKeyError``). This
    snapshot keeps libraries, the standard library and the project's package; test modules are still forgotten."""

    def __init__(self, preserve=None) -> None:
        super().__init__(preserve=lambda name: _installed_or_project(name) or bool(preserve and preserve(name)))


assert hasattr(_pytest.pytester, "SysModulesSnapshot"), "pytester no longer snapshots sys.modules this way"
_pytest.pytester.SysModulesSnapshot = _KeepLibraries
