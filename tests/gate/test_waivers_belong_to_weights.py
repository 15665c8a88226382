"""Known limitations belong to the weights they were measured on, not to a path: another checkpoint copied to the
embedded default's path is judged without the embedded waivers, and the run says why; an overlay named on purpose
still applies, and the run says it was measured on other weights."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from laya_robustness.gate.limits_file import ThresholdsError, measured_on
from laya_robustness.run.inputs.options import parse_settings
from laya_robustness.weights import weight_hashes

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "laya_fixtures"


@pytest.fixture
def replaced(tmp_path) -> Path:
    """A project whose embedded default's path holds another checkpoint (the seed-2 one), with the same rows,
    limits and overlay."""
    (tmp_path / "laya_fixtures").mkdir()
    shutil.copytree(FIXTURES / "rows", tmp_path / "laya_fixtures" / "rows")
    shutil.copytree(FIXTURES / "tiny-smolvlm-seed2", tmp_path / "laya_fixtures" / "tiny-smolvlm")
    shutil.copy(FIXTURES / "limitations.toml", tmp_path / "laya_fixtures" / "limitations.toml")
    shutil.copy(ROOT / "thresholds.toml", tmp_path / "thresholds.toml")
    return tmp_path


def test_the_embedded_overlay_says_which_weights_it_was_measured_on():
    assert measured_on(FIXTURES / "limitations.toml") == weight_hashes(FIXTURES / "tiny-smolvlm")
    settings = parse_settings({}, root=ROOT)
    assert settings.limitations == ROOT / "laya_fixtures" / "limitations.toml" and settings.limitations_note is None


def test_other_weights_at_the_embedded_path_are_judged_without_its_waivers_and_the_run_says_so(replaced):
    settings = parse_settings({}, root=replaced)
    assert settings.limitations is None
    assert settings.limitations_note.startswith(f"the known limitations in {replaced / 'laya_fixtures' / 'limitations.toml'} ")
    assert "measured on other weights (tensors 0eaaf349490c; this model: tensors 443b9f141a08)" \
        in settings.limitations_note and settings.limitations_note.endswith("applies them)")
    named = parse_settings({"--limitations": "laya_fixtures/limitations.toml"}, root=replaced)
    assert named.limitations == replaced / "laya_fixtures" / "limitations.toml"
    assert named.limitations_note.endswith(": applied, as --limitations names the file")
    shutil.copytree(ROOT / "robustness_tests", replaced / "robustness_tests",
                    ignore=shutil.ignore_patterns("__snapshots__", "__pycache__"))
    header = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "--collect-only", "-p",
                             "no:cacheprovider", "-p", "no:randomly"], cwd=replaced, capture_output=True, text=True,
                            timeout=300)
    assert f"laya-robustness: {settings.limitations_note}" in header.stdout, header.stdout[-2000:]


@pytest.mark.parametrize(("table", "key"), [
    ('weights_sha256 = { "model.safetensors" = "abc" }', "measured_on.weights_sha256.model.safetensors"),
    ("weights = 1", "measured_on.weights"),
    ("weights_sha256 = {}", "measured_on.weights_sha256"),
])
def test_a_malformed_measured_on_table_is_a_limits_error_naming_the_key(tmp_path, table, key):
    path = tmp_path / "overlay.toml"
    path.write_text(f"version = 1\n[measured_on]\n{table}\n")
    with pytest.raises(ThresholdsError) as raised:
        measured_on(path)
    assert key in str(raised.value)
