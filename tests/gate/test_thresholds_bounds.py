"""Limits files that are malformed in size or shape, not in content: nested 50,000 deep, a 5,000-digit integer, a
non-UTF-8 byte, a key of 50,000 dotted parts, a 4,000-digit max_flips, a count past the bound, a file of megabytes.
Each is refused at load, in well under a second, by a ThresholdsError naming the file, the key and its line (exit 4
from the gate, through --thresholds and --limitations alike), where the parser gave a traceback, took 72 s or let
the number through to crash the invariance judgement."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laya_robustness.gate.limits_file import MAX_COUNT, MAX_FILE_BYTES, ThresholdsError, load_thresholds

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {"orig": ("min_acc",), "text": ("max_flip",)}
DATASETS = ("exists_yesno",)
CONDITIONS = ("batched",)

#: name -> (the file's text or bytes, the key named, words of the problem)
MALFORMED = {
    "nested 50,000 deep": ("version = 1\nx = " + "[" * 50_000 + "]" * 50_000 + "\n", "x",
                           "line 2: arrays or inline tables nested over 16 deep"),
    "inline tables nested deep": ("version = 1\n[families.orig]\nmin_acc = " + "{a = " * 5000 + "1" + "}" * 5000,
                                  "families.orig.min_acc", "line 3: arrays or inline tables nested over 16 deep"),
    "a 5,000-digit integer": ("version = 1\n[gate]\nmax_regression = " + "1" * 5000 + "\n", "gate.max_regression",
                              "line 3: a number of 5,000 digits, over the limit of 64"),
    "a non-UTF-8 byte": (b"version = 1\n[families.orig]\nmin_acc = 0.5 # caf\xe9\n", "families.orig.min_acc",
                         "line 3: not UTF-8: byte 0xe9 at byte 48 of the file"),
    "a key of 50,000 dotted parts": ("version = 1\n" + ".".join(["a"] * 50_000) + " = 1\n", "a.a.a.a",
                                     "line 2: a key of 50,000 dotted parts, over the limit of 16"),
    "a table header of 50,000 parts": ("version = 1\n[" + ".".join(["a"] * 50_000) + "]\n", "a.a.a.a",
                                       "line 2: a key of 50,000 dotted parts, over the limit of 16"),
    "a 4,000-digit max_flips": ("version = 1\n[invariance.batched]\nmax_flips = " + "9" * 4000 + "\n",
                                "invariance.batched.max_flips", "line 3: a number of 4,000 digits, over the limit"),
    "a count past the bound": (f"version = 1\n[invariance.batched]\nmax_flips = {MAX_COUNT + 1}\n",
                               "invariance.batched.max_flips", f"expected an int <= {MAX_COUNT:,}"),
    "a file of megabytes": ("version = 1\n" + "# a comment line\n" * 200_000, "(file)",
                            f"over {MAX_FILE_BYTES:,} bytes, the limit of a limits file"),
}


def write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_limits_file_is_refused_fast_naming_the_file_and_the_key(tmp_path, name):
    content, key, words = MALFORMED[name]
    path = write(tmp_path / "limits.toml", content)
    started = time.monotonic()
    with pytest.raises(ThresholdsError) as raised:
        load_thresholds(path, families=FAMILIES, datasets=DATASETS, conditions=CONDITIONS)
    took = time.monotonic() - started
    assert took < 0.5, took
    assert raised.value.key.startswith(key) and words in raised.value.problem, str(raised.value)
    assert str(raised.value).startswith(f"{path}: {key}")
    assert len(str(raised.value)) < 400  # the key and the value are cut in the message


def test_the_bounds_leave_the_release_file_and_what_they_do_not_look_at_alone(tmp_path):
    """Strings and comments are not scanned: a reason holding a long dotted path, brackets and a long number loads."""
    reason = "." .join(["a"] * 40) + " [[[[[[[[[[[[[[[[[[[[ " + "7" * 100
    text = (f'version = 1\n[families.orig]\nmin_acc = 0.5 # {"[" * 40} {"9" * 100}\n'
            f'[[known_limitations]]\nfamily = "orig"\ndataset = "exists_yesno"\ncheck = "min_acc"\n'
            f'reason = """{reason}\n{reason}"""\n')
    limits = load_thresholds(write(tmp_path / "limits.toml", text), families=FAMILIES, datasets=DATASETS,
                             conditions=CONDITIONS)
    assert limits.known_limitations[0].reason.startswith("a.a.a")
    from laya_robustness.gate.run_limits import run_limits
    from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS

    started = time.monotonic()
    run_limits(ROOT / "thresholds.toml", datasets=["colour_choice", "context_choice", "count_choice", "exists_yesno",
                                                   "left_of_yesno"], conditions=INVARIANCE_CONDITIONS)
    assert time.monotonic() - started < 0.5


def test_an_overlay_is_read_within_the_same_bounds(tmp_path):
    overlay = write(tmp_path / "limitations.toml", "version = 1\nx = " + "[" * 50_000 + "]" * 50_000 + "\n")
    limits = write(tmp_path / "limits.toml", "version = 1\n[families.orig]\nmin_acc = 0.5\n")
    with pytest.raises(ThresholdsError, match=r"limitations\.toml: x: line 2: arrays or inline tables nested"):
        load_thresholds(limits, families=FAMILIES, datasets=DATASETS, conditions=CONDITIONS, overlays=[overlay])


def gate(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--rows-per-set", "1", "--families", "option_order", *args]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return result, time.monotonic() - started


@pytest.mark.parametrize("option, name, key", [
    ("--thresholds", "nested 50,000 deep", "x"),
    ("--thresholds", "a key of 50,000 dotted parts", "a.a.a"),
    ("--thresholds", "a 4,000-digit max_flips", "invariance.batched.max_flips"),
    ("--limitations", "a non-UTF-8 byte", "families.orig.min_acc"),
])
def test_the_gate_refuses_a_malformed_limits_file_with_exit_4_and_one_message(tmp_path, option, name, key):
    """Through the gate as a user runs it: exit 4, the file and key named, no traceback, nothing scored."""
    path = write(tmp_path / "limits.toml", MALFORMED[name][0])
    result, took = gate(option, str(path), "--report-dir", str(tmp_path / "reports"))
    out = result.stdout + result.stderr
    assert result.returncode == 4, out[-3000:]
    assert f"{path}: {key}" in out and MALFORMED[name][2] in out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert not (tmp_path / "reports" / "predictions.jsonl.gz").exists()
    assert took < 60, took
