"""Every docstring example in the library runs and holds (the examples are part of the documentation)."""

import doctest
import importlib
import pkgutil

import pytest

import laya_robustness

MODULES = sorted(m.name for m in pkgutil.walk_packages(laya_robustness.__path__, "laya_robustness.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"


def test_the_examples_are_found():
    attempted = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted
                    for n in MODULES)
    assert attempted >= 30
