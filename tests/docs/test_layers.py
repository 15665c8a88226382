"""The package's architecture holds: the import-linter contracts of pyproject.toml are kept, and no import cycle
exists, neither between modules nor between the sibling modules of a package (every import statement counts,
those inside functions and under ``if TYPE_CHECKING:`` included: grimp reads them all)."""

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def test_cycles_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.fixture(scope="module")
def graph():
    # every import, those under `if TYPE_CHECKING:` included: an import that names a type only still ties the two
    # modules (lint-imports' layers leave those out; a circle may not)
    return grimp.build_graph("laya_robustness", cache_dir=None, exclude_type_checking_imports=False)


def test_no_module_imports_itself_back(graph):
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert cycles(edges) == []


def test_no_sibling_packages_import_each_other_back(graph):
    packages = [m for m in graph.modules if graph.find_children(m)]
    found = {}
    for parent in packages:
        def child(module: str) -> str | None:
            if not module.startswith(parent + "."):
                return None
            return parent + "." + module[len(parent) + 1:].split(".")[0]

        edges: dict[str, set[str]] = {}
        for module in graph.modules:
            a = child(module)
            for imported in graph.find_modules_directly_imported_by(module) if a else ():
                b = child(imported)
                if b and b != a:
                    edges.setdefault(a, set()).add(b)
        if cycles(edges):
            found[parent] = cycles(edges)
    assert found == {}


def test_function_level_imports_are_in_the_graph(graph):
    """A function-level import (the plugin loads its malloc setting inside pytest_configure) is an edge too."""
    assert graph.direct_import_exists(importer="laya_robustness.pytest_plugin.gate",
                                      imported="laya_robustness.scoring.malloc")


def test_nothing_below_the_plugin_receives_its_session():
    """The run, the reports and everything under them take the run (``GateRun``), typed, never the plugin's session
    (pytest's own objects they cannot import: see the contracts): no parameter of theirs is named ``session``."""
    import ast

    adapters = {"pytest_plugin", "__main__.py", "api.py", "training.py"}
    found = []
    for path in sorted((ROOT / "laya_robustness").rglob("*.py")):
        if path.relative_to(ROOT / "laya_robustness").parts[0] in adapters:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({n})" for n in names & {"session"}]
    assert found == []


def test_the_import_contracts_are_kept():
    result = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                             "sys.exit(lint_imports_command())"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
