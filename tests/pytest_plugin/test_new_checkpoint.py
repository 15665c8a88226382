"""A new checkpoint at the same ``--model`` is compared with the committed snapshot: in a copy of the project, the
snapshot of a small configuration is recorded, the other trained tiny SmolVLM's weights are put in
``laya_fixtures/tiny-smolvlm``, and the snapshot test fails saying what moved; ``--snapshot-update`` rewrites the
same file, and what changed in it is lines of numbers and hashes."""

import difflib
import shlex
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A small configuration of the gate, its snapshot test alone.
SMALL = ("--families", "option_order", "--rows-per-set", "4", "-k", "snapshot")


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the gate with its own copy of the embedded fixtures (their weights are replaced) and no snapshot."""
    shutil.copytree(ROOT / "robustness_tests", tmp_path / "robustness_tests",
                    ignore=shutil.ignore_patterns("__snapshots__", "__pycache__"))
    shutil.copytree(ROOT / "laya_fixtures", tmp_path / "laya_fixtures")
    for name in ("thresholds.toml", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def gate(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:randomly", "-p",
                           "no:cacheprovider", *SMALL, *args], cwd=project, capture_output=True, text=True, timeout=600)


def snapshot_files(project: Path) -> list[Path]:
    return sorted((project / "robustness_tests" / "__snapshots__").rglob("*.json"))


def test_a_new_checkpoint_fails_the_snapshot_with_what_moved_and_an_update_rewrites_the_same_file(project):
    recorded = gate(project, "--snapshot-update")
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    [snapshot] = snapshot_files(project)
    assert snapshot.name.startswith("test_summary_snapshot[cpu][laya_fixtures_tiny-smolvlm.cpu.laya_fixtures_rows.s0.")
    before = snapshot.read_text()
    assert gate(project).returncode == 0  # the same weights: it matches

    shutil.copy(ROOT / "laya_fixtures" / "tiny-smolvlm-seed2" / "model.safetensors",
                project / "laya_fixtures" / "tiny-smolvlm" / "model.safetensors")
    changed = gate(project)
    out = changed.stdout
    assert changed.returncode == 1, out[-3000:]
    assert "FAILED robustness_tests/test_summary_snapshot.py::test_summary_snapshot[cpu]" in out
    assert re.search(r"the weights: fingerprint [0-9a-f]{8} -> [0-9a-f]{8}", out), out[-3000:]
    assert "the rows: fingerprint" not in out  # the same rows
    moved = re.findall(r"option_order/\w+ (acc|delta|flip): [-\d.]+ -> [-\d.]+ \((BEYOND|within) its 95% interval", out)
    assert moved, out[-3000:]
    assert f"summary snapshot (cpu) DIFFERS from {snapshot.name.split('][')[1].removesuffix('].json')}" in out

    updated = gate(project, "--snapshot-update")
    assert updated.returncode == 0, updated.stdout[-3000:]
    assert snapshot_files(project) == [snapshot]  # the same file, rewritten: no second snapshot beside it
    after = snapshot.read_text()
    diff = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    # what changed is the weights' hashes and one line per cell that moved (its headlines at review precision)
    cell_line = r'[+-]\s*"\w+/\w+": "[^"]*",?'
    hash_line = r'[+-]\s*("[\w.]+": )?"[0-9a-f]{8,64}",?'
    other = [line for line in diff if not (re.fullmatch(cell_line, line) or re.fullmatch(hash_line, line))]
    assert diff and other == [], other
    moved_cells = [line.split('"')[1] for line in diff if line.startswith("+") and re.fullmatch(cell_line, line)]
    assert moved_cells and len(moved_cells) == len(set(moved_cells))
    assert len(after.splitlines()) <= 60  # the whole snapshot of this configuration reads as one page


#: The configuration the page's whole sequence runs on here: orig and image_shuffle, where the new weights miss
#: a check the old weights were known to miss (image_shuffle/left_of_yesno min_gap) and one they were not.
SEQUENCE_CONFIGURATION = ("--families", "image_shuffle", "--rows-per-set", "40", "-m", "not invariance",
                          "--benchmark-skip", "-p", "no:randomly",
                          "-p", "no:cacheprovider")
PAGE = ROOT / "docs" / "new-checkpoint.md"


def page_sequence() -> list[tuple[str, int | None, bool]]:
    """(command, the exit status its comment states, whether the new weights are in place) of the page's sequence."""
    block = re.search(r"<!-- new-checkpoint-sequence -->\n```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert block, f"{PAGE}: no block marked <!-- new-checkpoint-sequence -->"
    steps, new_weights = [], False
    for line in block.group(1).splitlines():
        command, _, comment = line.partition("#")
        if not command.strip():
            new_weights = new_weights or "new weights" in comment
            continue
        stated = re.match(r"\s*exit (\d)", comment)
        steps.append((command.strip(), int(stated.group(1)) if stated else None, new_weights))
    return steps


def test_the_pages_whole_sequence_for_a_new_checkpoint_runs_as_written(project):
    steps = page_sequence()
    assert [s for s in steps if s[1] is None] == [], "every command of the sequence states its exit status"
    assert any(not s[2] for s in steps) and any(s[2] for s in steps), "the sequence says where the weights change"
    assert gate(project, "--families", "image_shuffle", "--rows-per-set", "40", "--snapshot-update").returncode == 0
    outputs = []
    for command, status, new_weights in steps:
        if new_weights and not (project / "weights-replaced").exists():
            shutil.copy(ROOT / "laya_fixtures" / "tiny-smolvlm-seed2" / "model.safetensors",
                        project / "laya_fixtures" / "tiny-smolvlm" / "model.safetensors")
            (project / "weights-replaced").touch()
        words = shlex.split(command)
        if words[0] == "pytest":
            words = [sys.executable, "-m", "pytest", *words[1:], *SEQUENCE_CONFIGURATION]
        else:
            words = [sys.executable, *words[1:]]
        done = subprocess.run(words, cwd=project, capture_output=True, text=True, timeout=900)
        outputs.append(done.stdout)
        assert done.returncode == status, f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    new_run, drafted = outputs[1], (project / "limitations.toml").read_text(encoding="utf-8")
    assert "were measured on other weights" in new_run  # the old weights' limitations were not applied
    assert "FAILED robustness_tests/test_summary_snapshot.py::test_summary_snapshot[cpu]" in new_run
    failed = re.findall(r"^FAIL (\w+)/(\w+) (\w+):", new_run, re.M)
    assert ("image_shuffle", "left_of_yesno", "min_gap") in failed, new_run[-3000:]
    for family, dataset, check in failed:  # each failed check drafted for the new weights, with their hash
        assert f'family = "{family}"\ndataset = "{dataset}"\ncheck = "{check}"' in drafted
    assert drafted.count("[[known_limitations]]") == len(failed)
    from laya_robustness.weights import weight_hashes

    tensors = weight_hashes(project / "laya_fixtures" / "tiny-smolvlm")["tensors"]
    assert f'"tensors" = "{tensors}"' in drafted
    assert re.search(r"verdicts: 0 FAIL, 0 XPASS, [1-9]\d* xfail", outputs[-1]), outputs[-1][-3000:]
