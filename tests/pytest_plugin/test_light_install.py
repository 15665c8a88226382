"""The gate alone (``pip install -e .``, no extra) runs its first look, in a Python that sees only what that install
would put in site-packages.

The light install is computed, not listed: the distributions ``laya-robustness`` requires without an extra, and
theirs, recursively (``importlib.metadata``). Their files are linked into one folder, and the gate runs under
``python -S`` (no site-packages) with that folder and the project on its path: ray, mlflow, matplotlib, datasets
and the other extras' packages are not there, nor their pytest plugins."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def light_distributions() -> set[str]:
    """The canonical names of the distributions ``pip install laya-robustness`` installs (no extra)."""
    todo, seen = ["laya-robustness"], set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def light_site(folder: Path) -> Path:
    """A folder holding links to the files of the light install's distributions only (their packages, modules and
    metadata), as a site-packages of a venv where only those were installed."""
    folder.mkdir()
    for name in sorted(light_distributions()):
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        for top in sorted({f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}):
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def test_the_light_install_runs_the_first_look(tmp_path):
    light = light_distributions()
    assert {"torch", "transformers", "pytest", "syrupy"} <= light and "ray" not in light and "mlflow" not in light
    site = light_site(tmp_path / "site")
    args = ["robustness_tests", "--rows-per-set", "20", "-m", "not invariance", "--benchmark-skip", "-p",
            "no:cacheprovider", "--report-dir", str(tmp_path / "reports")]
    # -S: no site-packages of this venv; only the light install's files and the project (installed editable)
    script = (f"import sys\nsys.path[:0] = [{str(ROOT)!r}, {str(site)!r}]\n"
              "import importlib.util\nmissing = [m for m in ('ray', 'matplotlib', 'datasets', 'mlflow', 'pyarrow') "
              "if importlib.util.find_spec(m)]\nassert not missing, missing\n"
              f"import pytest\nsys.exit(pytest.main({args!r}))\n")
    run = subprocess.run([sys.executable, "-S", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"^verdicts: \d+ FAIL", run.stdout, re.M), run.stdout[-3000:]
    assert "plugins: " in run.stdout and "randomly" not in run.stdout.split("plugins: ")[1].split("\n")[0]
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text(encoding="utf-8"))
    assert summary["meta"]["scope"]["complete"] is True
    assert (tmp_path / "reports" / "report.html").is_file()
