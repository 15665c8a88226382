"""Where the project's files are: its root, the tests' folder and the embedded default's parts."""

from pathlib import Path

#: The project's root (the repository).
ROOT = Path(__file__).resolve().parents[2]
#: The tests' folder: on a gate run's path, it makes ``helpers.fakes:<name>`` a scorer plug-in.
TESTS = ROOT / "tests"
EMBEDDED_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
FIXTURE_ROWS = ROOT / "laya_fixtures" / "rows"
