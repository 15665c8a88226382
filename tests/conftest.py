"""Fixtures shared by the project's own tests: the embedded checkpoint and fixture rows."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
FIXTURE_ROWS = ROOT / "laya_fixtures" / "rows"


@pytest.fixture(scope="session")
def fixture_rows():
    from laya_robustness.rows import load_rows

    return load_rows(FIXTURE_ROWS)


@pytest.fixture(scope="session")
def embedded_scorer():
    from laya_robustness.scoring.hf import HFVLMScorer

    return HFVLMScorer.from_pretrained(str(EMBEDDED_MODEL))
