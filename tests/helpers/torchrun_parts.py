"""What the tests that start ``torchrun`` worlds share: a world of 2 ranks run to its end (``torchrun``) and a saved
model gated in this process (``gated_alone``), to compare the world's records and identity with."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import ROOT


def torchrun(program: Path, setup: str, out: Path, timeout: float, check: bool = True,
             **env: str) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node 2 <program> <setup> <out>`` offline, with ``env`` added; a test failure when it
    does not end within ``timeout`` seconds (a rank waiting forever?), or, with ``check``, ends other than 0."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    environment.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT), **env)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(program), setup, str(out)]
    try:
        done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the {setup} world did not end in {timeout} s (a rank waiting forever?): {exc.stderr}")
    assert done.returncode == 0 or not check, done.stderr[-4000:]
    return done


def gated_alone(saved: Path, report_dir: Path, step: int, **gate) -> Path:
    """The model saved in ``saved`` gated in this process as ``RobustnessCallback`` gates at ``step``: the folder of
    its reports."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from laya_robustness.training import RobustnessCallback

    model = AutoModelForImageTextToText.from_pretrained(saved, attn_implementation="eager")
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", report_dir=report_dir, root=ROOT, **gate)
    callback.gate(model, AutoProcessor.from_pretrained(saved), step)
    return report_dir / f"checkpoint-{step}"
