"""The gate project of the plugin tests: a copy of the gate's test modules with two small datasets, the fake scorer
(``helpers.fakes``) and a limits file, and gate runs in it, in process or as a subprocess."""

import shutil
import sys
from pathlib import Path

from laya_robustness.recipes.fixture_rows import generate_rows, write_manifest

from helpers.paths import ROOT, TESTS

#: The families of the gate runs that the reliability tests interrupt, crash and resume.
FAMILIES = ("--families", "option_order,image_shuffle")


def copy_gate_tests(project: Path) -> None:
    """The gate's test modules copied into ``project/robustness_tests`` (without their snapshots)."""
    shutil.copytree(ROOT / "robustness_tests", project / "robustness_tests",
                    ignore=shutil.ignore_patterns("__snapshots__", "__pycache__"))


def fakes_importable(monkeypatch) -> None:
    """The fake scorers importable as ``helpers.fakes`` by this process and the gate runs it starts."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def make_gate(pytester, monkeypatch, limits: str):
    """A project with the gate's test modules, two small datasets, the fake scorer and ``limits`` as limits.toml."""
    copy_gate_tests(pytester.path)
    for name in ("colour_choice", "exists_yesno"):
        write_manifest(generate_rows(name, 24, seed=5), pytester.path / "rows")
    # pytest-randomly off: a failing test's output stays in one order (test_scope.py runs the gate shuffled)
    pytester.makeini("[pytest]\naddopts = --strict-markers -p no:cacheprovider -p no:randomly\n"
                     "laya_scorer = helpers.fakes:oracle\nlaya_data = rows\nlaya_model = fake-model\n")
    (pytester.path / "limits.toml").write_text(limits)
    fakes_importable(monkeypatch)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # run under xdist, the gate's own runs are not xdist workers
    return pytester


def run(pytester, *args, subprocess=False):
    """A gate run in the project (no snapshot, benchmark or invariance test), in process or as a subprocess."""
    # importlib mode: the copied gate modules must not clash with the real ones already imported
    args = ("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml",
            "-k", "not (snapshot or benchmark or invariance)", *args)
    return pytester.runpytest_subprocess(*args) if subprocess else pytester.runpytest(*args)


def gate_command(gate, *args) -> list[str]:
    """The command of a gate run in the project as a process of its own, scored by the counting fake scorer."""
    return [sys.executable, "-m", "pytest", "robustness_tests", "--import-mode=importlib", "-p", "no:cacheprovider",
            "--thresholds", "limits.toml", "-k", "not (snapshot or benchmark or invariance) and not gpu",
            "--scorer", "helpers.fakes:counting", *FAMILIES, *args]


def scored_rows(count_file: Path) -> int:
    """The rows the counting fake scorer scored, from the file it counts them in (0 where it wrote none)."""
    return sum(int(n) for n in count_file.read_text().split()) if count_file.exists() else 0


def install_plugin_package(site: Path, module: str, source: str, family: str = "grayscale") -> None:
    """Install a package into ``site`` as pip would leave it: its module and a dist-info folder whose
    entry_points.txt names the module under ``laya_robustness.families`` (as ``family``)."""
    (site / f"{module}.py").write_text(source)
    info = site / f"laya_{family}_family-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: laya-{family}-family\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[laya_robustness.families]\n{family} = {module}\n")
    (info / "RECORD").write_text("")
