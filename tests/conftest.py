"""Fixtures shared by the project's own tests: the embedded checkpoint and fixture rows."""

from pathlib import Path
from typing import Any, Mapping

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
FIXTURE_ROWS = ROOT / "laya_fixtures" / "rows"


@pytest.fixture(scope="session")
def fixture_rows():
    from laya_robustness.loaders import load_rows

    return load_rows(FIXTURE_ROWS)


@pytest.fixture(scope="session")
def served_model(tmp_path_factory):
    """``transformers serve`` of the embedded checkpoint on 127.0.0.1, one for every served-model test (it comes up
    in about 20 s); stopped at the end of the session (``served_parts.ServedModel``)."""
    pytest.importorskip("fastapi", reason="the served-model tests need transformers[serving] (the test extra has it)")
    from served_parts import ServedModel

    model = ServedModel(tmp_path_factory.mktemp("served-model")).start()
    yield model
    model.stop()


@pytest.fixture(scope="session")
def embedded_scorer():
    from laya_robustness.scoring.hf import HFVLMScorer

    return HFVLMScorer.from_pretrained(str(EMBEDDED_MODEL))


def summary_cell(summary: Mapping[str, Any], family: str, dataset: str) -> Mapping[str, Any]:
    """The cell of (family, dataset), looked up in the block its family is declared in.

    Raises KeyError naming the family, dataset and block when the summary has no such cell.
    """
    from laya_robustness.summary import block_of

    block = block_of(family)
    try:
        return summary[block][family][dataset]
    except KeyError:
        raise KeyError(f"summary has no cell {family}/{dataset} (looked in {block!r})") from None
