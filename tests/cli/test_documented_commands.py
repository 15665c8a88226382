"""Every command and Python example the README and the docs show is run, so none can drift from the code.

A fenced ``bash`` block is split into commands (``\\`` continuations joined, ``&&`` chains split, comments
dropped) and each goes to the runner of its first words:

- ``pytest ...``: run in a copy of the project up to collection (``--collect-only``), where every option,
  data file and limits file is read and checked, so a documented command that would stop with a usage error
  fails here; the full gate run is the README's test command, which CI runs. A quick start (a block marked
  ``<!-- in-full -->``: the first look, the served first look) runs to its verdict (exit 0 or 1) as written, its
  reports in a folder of the test's, and its page says how long it takes.
- ``python -m laya_robustness ...``: run in full, in process, on the reports of a small gate run (in the
  order the pages show them: the ``variants`` commands write the files a later gate command reads).
- ``transformers serve ...``, ``llama-server ...`` and ``laya-vllm-server ...`` (an environment assignment before it
  is passed on): started for real on a free port of 127.0.0.1, waited for until it answers, and stopped; the gate
  command against a served model collects against the tests' own server of that kind. Without a built
  ``llama-server`` (``scripts/build_llama_server.sh``) or vLLM's venv (``scripts/build_vllm_venv.sh``) its commands
  skip, saying so,
  as does ``fixtures gguf`` without the llama.cpp source that script unpacks.
- installation (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``, ``bash scripts/...``): what
  ``.ci/run`` does from scratch on every landing; here each package or extra named must be one it installs, and a
  script one it runs.
- ``python train.py`` and ``torchrun ... train.py``: the page's script of that name (a ``python`` block marked
  ``<!-- script -->`` whose first line is ``# train.py``) run as written, in a folder of the test's that holds the
  fixtures and the gate's limits; its reports must land in one folder, which each evaluation's console line names.
- a command no runner knows fails the test: a new kind of documented command needs its runner.

A ``python`` block is executed as written, in a fresh interpreter from the project root; a block marked
``<!-- plugin-example: ... -->`` is a module the plug-in tests import (``tests/docs/test_scorer_plugin_example.py``),
and one marked ``<!-- script -->`` is run by the page's commands that name it.
What a reader replaces (``path/to/rows``, a hub id) is replaced by the embedded fixtures, and what this
machine lacks (a GPU, eight of them) by what it has (``PLACEHOLDERS``); a ``variants`` command gets
``--rows-per-set 1`` (the tiny language model writes for 5 rows, not 1,200).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- (?P<mark>[\w-]+)[^>]*-->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
#: What a reader types in place of a placeholder, here: the embedded fixtures.
PLACEHOLDERS = {
    "HuggingFaceTB/SmolVLM-256M-Instruct": "laya_fixtures/tiny-smolvlm",
    "path/to/rows.jsonl": "laya_fixtures/rows",
    "path/to/rows": "laya_fixtures/rows",
    "--data rows/": "--data laya_fixtures/rows",
    "--device cuda": "--device cpu",
    "-n 8": "-n 2",
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


#: Every distinct (page, command) of the pages' shell blocks, once: a command a page repeats (the served quick
#: start, shown again beside the steps that use it) is the same check, and a quick start runs in full in minutes.
DOCUMENTED = list(dict.fromkeys((page, c) for page, _, body in _blocks("bash") for c in commands(body)))
#: The commands of blocks marked ``<!-- in-full -->`` (the quick starts): run to their end, not only collected.
IN_FULL = {(page, c) for page, mark, body in _blocks("bash") if mark == "in-full" for c in commands(body)}
#: How a page says how long a command takes: "about 20 s", "about 1.5 minutes", "about 1:45".
STATED_TIME = re.compile(r"about [\d.:]+ ?(s|seconds?|minutes?|min)?\b")


def _kind(command: str) -> str:
    words = shlex.split(command)
    if words[0] == "pytest":
        return "pytest"
    if words[:3] == ["python", "-m", "laya_robustness"]:
        return "cli"
    while "=" in words[0] and len(words) > 1:  # an environment assignment before the command
        words = words[1:]
    if words[:2] == ["transformers", "serve"] or words[0] in ("llama-server", "laya-vllm-server"):
        return "serve"
    if words[0] in ("python", "torchrun") and words[-1].endswith(".py"):
        return "script"
    if words[:3] == ["python3", "-m", "venv"] or words[:2] == [".", ".venv/bin/activate"] or words[:2] == ["pip", "install"] \
            or words[0] == "bash" and words[1].startswith("scripts/"):
        return "install"
    return "unknown"


def test_the_docs_show_commands_of_every_kind():
    kinds = {_kind(c) for _, c in DOCUMENTED}
    assert {"pytest", "cli", "install", "serve", "script"} <= kinds, kinds


def test_every_documented_command_has_a_runner():
    unknown = [f"{page}: {command}" for page, command in DOCUMENTED if _kind(command) == "unknown"]
    assert not unknown, f"no runner for these documented commands (add one to {Path(__file__).name}): {unknown}"


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
            if "test" in named.group(1):  # the README's install resolves what CI's does
                assert "-c .ci/constraints.txt" in command and '-e ".[test]" -c .ci/constraints.txt' in ci, \
                    f"{page}: {command!r} resolves other versions than .ci/run's install"
        else:
            assert f'"{spec}"' in ci or f" {spec}" in ci, f"{page}: .ci/run does not install {spec!r}"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the gate (its tests, limits and snapshots) with the embedded fixtures linked in, the reports
    of a small run of it under ``reports/`` (and copied to ``reports-main/``, ``robustness/checkpoint-2/`` and
    ``-4/``), and its predictions under ``old/``, ``a/`` and ``b/``."""
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "robustness_tests", root / "robustness_tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("thresholds.toml", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    (root / "laya_fixtures").symlink_to(ROOT / "laya_fixtures")
    run = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "--rows-per-set", "3", "-k", "not (snapshot or benchmark)",
                          "--families", "option_order,image,shift,rephrase,language"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]  # 3 rows per set may cross a limit
    for other in ("old", "a", "b"):  # an earlier release and two models, as the pages name them: copies of it
        (root / other).mkdir()
        shutil.copy(root / "reports" / "predictions.jsonl.gz", root / other / "predictions.jsonl.gz")
    # the base branch's reports a pull request is compared with, as the new-checkpoint page names them
    shutil.copytree(root / "reports", root / "reports-main", ignore=shutil.ignore_patterns("journal"))
    for step in (2, 4):  # the Trainer callback's reports at two evaluations, as the training page names them
        shutil.copytree(root / "reports", root / "robustness" / f"checkpoint-{step}",
                        ignore=shutil.ignore_patterns("journal"))
    return root


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory) -> Path:
    """The tiny causal language model the ``variants`` commands write with (in place of a hub id)."""
    from laya_robustness.recipes.tiny_causal_lm import build_causal_lm

    return build_causal_lm(tmp_path_factory.mktemp("causal-lm"))


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "cli"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_project_command_runs(page, command, project, causal_lm, monkeypatch, tmp_path):
    if " fixtures gguf" in command:
        from laya_robustness.recipes.gguf import default_source

        if not (default_source() / "convert_hf_to_gguf.py").is_file():
            pytest.skip(f"llama.cpp's converter is not unpacked at {default_source()}: "
                        "`bash scripts/build_llama_server.sh` unpacks it")
    monkeypatch.chdir(project)
    assert _run_cli(command, causal_lm, tmp_path) == 0, f"{page}: {command}"


def _run_cli(command: str, causal_lm: Path, tmp_path: Path) -> int:
    """A documented ``python -m laya_robustness`` command's exit code, run here in the current directory."""
    from laya_robustness.__main__ import main

    args = [a.replace("/tmp/", f"{tmp_path}/") for a in shlex.split(_substituted(command))[3:]]
    args = [match for a in args for match in (sorted(glob.glob(a)) or [a])]  # a shell's pattern expansion
    if args[0] == "variants":
        args = [str(causal_lm) if a == "Qwen/Qwen3-8B" else a for a in args] + ["--rows-per-set", "1"]
    return main(args)


def _write_what_it_reads(command: str, project: Path, request, monkeypatch, tmp_path) -> None:
    """Run first the documented commands that write (``--out``) a file ``command`` reads and the project lacks
    (``rephrasings.jsonl`` from ``variants rephrase``), so the pages' order holds whatever order the tests run in."""
    writers = {words[words.index("--out") + 1]: c for _, c in DOCUMENTED if _kind(c) == "cli"
               for words in [shlex.split(c)] if "--out" in words}
    for word in shlex.split(command):
        if word in writers and not (project / word).exists():
            monkeypatch.chdir(project)
            assert _run_cli(writers[word], request.getfixturevalue("causal_lm"), tmp_path) == 0, writers[word]


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "serve"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_server_starts_and_answers(page, command, tmp_path):
    from helpers.served_parts import (free_port, llama_server_binary, vllm_server_binary, wait_for_health,
                                      wait_for_models)

    words, env = shlex.split(command), dict(os.environ)
    while "=" in words[0]:  # an environment assignment before the command, as a shell takes it
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    port = words[words.index("--port") + 1]
    words[words.index("--port") + 1] = str(free_port())
    vllm = words[0] == "laya-vllm-server"
    if vllm:
        binary = vllm_server_binary()
        if binary is None:
            pytest.skip("vLLM is not installed: `bash scripts/build_vllm_venv.sh` makes laya-vllm-server")
        words[0] = str(binary)
    elif words[0] == "llama-server":
        binary = llama_server_binary()
        if binary is None:
            pytest.skip("llama-server is not built: `bash scripts/build_llama_server.sh` builds it")
        words[0] = str(binary)
    else:
        words[0] = str(Path(sys.executable).with_name("transformers"))
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen(words, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=env)
    base = f"http://127.0.0.1:{words[words.index('--port') + 1]}"
    try:
        if vllm:  # its /health answers before the engine is up
            wait_for_models(server, base, tmp_path / "server.log", "laya-vllm-server", 420)
        else:
            wait_for_health(server, base, tmp_path / "server.log", Path(words[0]).name)
    finally:  # its whole process group, by its id, whatever the test's outcome
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert port.isdigit()


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "pytest"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_pytest_command_collects(page, command, project, request, monkeypatch, tmp_path):
    in_full = (page, command) in IN_FULL
    command = _substituted(command)
    _write_what_it_reads(command, project, request, monkeypatch, tmp_path)
    if "--endpoint http://127.0.0.1:8000/v1" in command:  # the tests' own server of the embedded checkpoint
        command = command.replace("http://127.0.0.1:8000/v1", request.getfixturevalue("served_model").url)
    if "--endpoint http://127.0.0.1:8080/v1" in command:  # llama-server of its GGUF files, as the page starts it
        command = command.replace("http://127.0.0.1:8080/v1", request.getfixturevalue("llama_server").url)
    if in_full:  # a quick start: run to its verdict, its reports aside
        run = subprocess.run([sys.executable, "-m", "pytest", *shlex.split(command)[1:], "-p", "no:cacheprovider",
                              "--report-dir", str(tmp_path / "reports")], cwd=project, capture_output=True,
                             text=True, timeout=900)
        assert run.returncode in (0, 1), f"{page}: {command}\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
        assert "robustness gate (cpu): verdict" in run.stdout and "verdicts: " in run.stdout, run.stdout[-3000:]
        return
    run = subprocess.run([sys.executable, "-m", "pytest", *shlex.split(command)[1:], "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=project, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{page}: {command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    assert re.search(r"\d+ tests? collected", run.stdout), run.stdout[-2000:]


def test_the_quick_starts_run_in_full_and_their_pages_say_how_long_they_take():
    assert {page for page, _ in IN_FULL} >= {"docs/getting-started.md", "docs/served.md"}
    for page in {page for page, _ in IN_FULL}:
        text = (ROOT / page).read_text(encoding="utf-8")
        for block in re.finditer(r"<!-- in-full -->\n```bash\n.*?```", text, re.S):
            around = text[max(0, block.start() - 700):block.end() + 700]
            assert STATED_TIME.search(around), f"{page}: say how long the quick start after/before it takes"


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from helpers.served_parts import LlamaServer, llama_server_binary

    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built: `bash scripts/build_llama_server.sh` builds it")
    server = LlamaServer(tmp_path_factory.mktemp("llama-server"), binary).start()
    yield server
    server.stop()


PYTHON = [(page, mark, body) for page, mark, body in _blocks("python")]
#: The scripts the pages' commands run: (page, the name its first line gives) -> its text.
SCRIPTS = {(page, body.splitlines()[0].removeprefix("#").strip()): body for page, mark, body in PYTHON
           if mark == "script"}


@pytest.mark.parametrize("page, mark, body", PYTHON, ids=lambda x: str(x)[:40])
def test_a_documented_python_example_runs(page, mark, body, tmp_path):
    if mark == "plugin-example":
        assert "plugin-example" in (ROOT / "tests" / "docs" / "test_scorer_plugin_example.py").read_text()
        return
    if mark == "script":  # run by the page's commands that name it (test_a_documented_script_runs)
        name = body.splitlines()[0].removeprefix("#").strip()
        assert any(p == page and _kind(c) == "script" and shlex.split(c)[-1] == name for p, c in DOCUMENTED), \
            f"{page}: no command runs the script {name!r}"
        return
    script = tmp_path / "example.py"
    script.write_text(body)
    run = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{page}:\n{body}\n{run.stderr[-2000:]}"


@pytest.mark.parametrize("page, command", [(p, c) for p, c in DOCUMENTED if _kind(c) == "script"],
                         ids=lambda x: str(x)[:70])
def test_a_documented_script_runs_and_its_reports_land_in_one_folder(page, command, tmp_path):
    """``python train.py`` / ``torchrun ... train.py`` on the page's script, as written: it ends 0, every evaluation's
    reports are in one folder (under ``torchrun`` too: rank 0 writes, the ranks gate together), and each evaluation's
    console line names its folder."""
    words = shlex.split(command)
    name = words[-1]
    assert (page, name) in SCRIPTS, f"{page}: {command!r} runs {name}, and the page shows no <!-- script --> of it"
    (tmp_path / name).write_text(SCRIPTS[page, name])
    (tmp_path / "laya_fixtures").symlink_to(ROOT / "laya_fixtures")
    shutil.copy(ROOT / "thresholds.toml", tmp_path / "thresholds.toml")
    launcher = [sys.executable] if words[0] == "python" else [sys.executable, "-m", "torch.distributed.run"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT))
    run = subprocess.run(launcher + words[1:], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{page}: {command}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    checkpoints = sorted((Path(folder) for folder, _, files in os.walk(tmp_path)  # symlinks not followed
                          if "summary.json" in files and Path(folder).name.startswith("checkpoint-")),
                         key=lambda folder: int(folder.name.removeprefix("checkpoint-")))
    assert checkpoints and len({c.parent for c in checkpoints}) == 1, checkpoints  # one report folder per run
    lines = [line for line in run.stdout.splitlines() if line.startswith("robustness gate, step ")]
    assert [f"checkpoint-{line.split()[3].rstrip(':')}" for line in lines] == [c.name for c in checkpoints], lines
    for line, checkpoint in zip(lines, checkpoints):
        assert line.endswith(f"; reports in {checkpoint.relative_to(tmp_path)}"), line
    assert "gates alone" not in run.stderr and "different folders" not in run.stderr, run.stderr[-4000:]
