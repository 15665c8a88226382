"""Every command and Python example the README and the docs show is run, so none can drift from the code.

A fenced ``bash`` block is split into commands (``\\`` continuations joined, ``&&`` chains split, comments
dropped) and each goes to the runner of its first words:

- ``pytest ...``: run in a copy of the project up to collection (``--collect-only``), where every option,
  data file and limits file is read and checked, so a documented command that would stop with a usage error
  fails here; the full gate run is the README's test command, which CI runs.
- ``python -m laya_robustness ...``: run in full, in process, on the reports of a small gate run.
- installation (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``): what ``.ci/run`` does
  from scratch on every landing; here each package or extra named must be one it installs.
- a command no runner knows fails the test: a new kind of documented command needs its runner.

A ``python`` block is executed as written, in a fresh interpreter from the project root; a block marked
``<!-- plugin-example: ... -->`` is a module the plug-in tests import (``tests/test_scorer_plugin_example.py``).
Placeholders a reader replaces (``path/to/rows``, a hub id) are replaced by the embedded fixtures
(``PLACEHOLDERS``).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- (?P<mark>[\w-]+)[^>]*-->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
#: What a reader types in place of a placeholder, here: the embedded fixtures.
PLACEHOLDERS = {
    "HuggingFaceTB/SmolVLM-256M-Instruct": "laya_fixtures/tiny-smolvlm",
    "path/to/rows.jsonl": "laya_fixtures/rows",
    "path/to/rows": "laya_fixtures/rows",
    "old/predictions.jsonl.gz": "reports/predictions.jsonl.gz",
    "a/predictions.jsonl.gz": "reports/predictions.jsonl.gz",
    "b/predictions.jsonl.gz": "reports/predictions.jsonl.gz",
}


def _blocks(lang: str) -> list[tuple[str, str, str]]:
    """(page name, the mark before the block, body) of every ``lang`` block."""
    out = []
    for page in PAGES:
        for m in BLOCK.finditer(page.read_text(encoding="utf-8")):
            if m.group("lang") == lang:
                out.append((page.relative_to(ROOT).as_posix(), m.group("mark") or "", m.group("body")))
    return out


def commands(body: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments dropped, ``&&`` chains split."""
    text = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        out += [part.strip() for part in line.split("&&") if part.strip()]
    return out


def _substituted(command: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    return command


DOCUMENTED = [(page, c) for page, _, body in _blocks("bash") for c in commands(body)]


def _kind(command: str) -> str:
    words = shlex.split(command)
    if words[0] == "pytest":
        return "pytest"
    if words[:3] == ["python", "-m", "laya_robustness"]:
        return "cli"
    if words[:3] == ["python3", "-m", "venv"] or words[:2] == [".", ".venv/bin/activate"] or words[:2] == ["pip", "install"]:
        return "install"
    return "unknown"


def test_the_docs_show_commands_of_every_kind():
    kinds = {_kind(c) for _, c in DOCUMENTED}
    assert {"pytest", "cli", "install"} <= kinds, kinds


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "unknown"] or [None],
                         ids=lambda x: str(x)[:60])
def test_every_documented_command_has_a_runner(page, command):
    if page is None:
        return
    pytest.fail(f"{page}: no runner for the documented command {command!r}; add one to {Path(__file__).name}")


def _ci_installs() -> tuple[str, set[str]]:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return ci, set(test_extra)


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "install"],
                         ids=lambda x: str(x)[:60])
def test_an_install_step_is_one_ci_takes_from_scratch(page, command):
    ci, extras = _ci_installs()
    words = shlex.split(command)
    if words[0] != "pip":
        assert command in ci or words[:3] == ["python3", "-m", "venv"] and "python3 -m venv .venv" in ci, command
        return
    for spec in words[2:]:
        if spec.startswith("-"):
            continue
        named = re.fullmatch(r"\.\[([\w,-]+)\]", spec)
        if named:
            unknown = set(named.group(1).split(",")) - extras
            assert not unknown, f"{page}: {command!r} names extras {unknown} pyproject.toml does not declare"
            assert '-e ".[test]"' in ci
        else:
            assert f'"{spec}"' in ci or f" {spec}" in ci, f"{page}: .ci/run does not install {spec!r}"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the gate (its tests, limits and snapshots) with the embedded fixtures linked in, and the
    reports of a small run of it under ``reports/``."""
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "robustness_tests", root / "robustness_tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("thresholds.toml", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    (root / "laya_fixtures").symlink_to(ROOT / "laya_fixtures")
    run = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "--rows-per-set", "3", "-k", "not (snapshot or benchmark)",
                          "--families", "option_order,image,text,rephrase,language"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (root / "reports" / "predictions.jsonl.gz").is_file()
    return root


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "pytest"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_pytest_command_collects(page, command, project):
    args = shlex.split(_substituted(command))[1:]
    run = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{page}: {command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    assert re.search(r"\d+ tests? collected", run.stdout), run.stdout[-2000:]


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "cli"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_project_command_runs(page, command, project, monkeypatch, tmp_path):
    from laya_robustness.__main__ import main

    monkeypatch.chdir(project)
    args = [a.replace("/tmp/", f"{tmp_path}/") for a in shlex.split(_substituted(command))[3:]]
    args = [a for a in args if not (a.startswith("[") or a.endswith("]"))]  # an [optional part] is left out
    assert main(args) == 0, f"{page}: {command}"


PYTHON = [(page, mark, body) for page, mark, body in _blocks("python")]


@pytest.mark.parametrize("page, mark, body", PYTHON, ids=lambda x: str(x)[:40])
def test_a_documented_python_example_runs(page, mark, body, tmp_path):
    if mark == "plugin-example":
        assert "plugin-example" in (ROOT / "tests" / "test_scorer_plugin_example.py").read_text()
        return
    script = tmp_path / "example.py"
    script.write_text(body)
    run = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{page}:\n{body}\n{run.stderr[-2000:]}"
