"""Fixtures shared by the project's own tests: the embedded checkpoint and fixture rows."""

from pathlib import Path
from typing import Any, Mapping

import sys

import _pytest.pytester
import pytest

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
FIXTURE_ROWS = ROOT / "laya_fixtures" / "rows"
_INSTALLED = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
_PROJECT_PACKAGE = str(ROOT / "laya_robustness")


def _installed_or_project(name: str) -> bool:
    """Whether ``sys.modules[name]`` is a library, the standard library or the project's package (not a module
    that an in-process pytester run wrote into its temporary folder)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if path is None:
        return getattr(module, "__path__", None) is None  # a built-in module; a namespace package may be a test's
    path = str(Path(path).resolve())
    return path.startswith(_INSTALLED) or path.startswith(_PROJECT_PACKAGE)


class _KeepLibraries(_pytest.pytester.SysModulesSnapshot):
    """pytester forgets every module imported during an in-process run (``pytester.runpytest``), so that the
    next run re-imports the test files it wrote. Forgetting libraries too breaks the rest of the session: a
    re-imported ``transformers`` model module gives classes that ``isinstance`` no longer matches, and a
    re-imported ``datasets`` registers its pyarrow extension types a second time (``ArrowKeyError``). This
    snapshot keeps libraries, the standard library and the project's package; test modules are still forgotten."""

    def __init__(self, preserve=None) -> None:
        super().__init__(preserve=lambda name: _installed_or_project(name) or bool(preserve and preserve(name)))


assert hasattr(_pytest.pytester, "SysModulesSnapshot"), "pytester no longer snapshots sys.modules this way"
_pytest.pytester.SysModulesSnapshot = _KeepLibraries


def tensors_digest(checkpoint: Path) -> str:
    """A checkpoint's weights digest recomputed here, apart from the package (numpy, not torch): sha256 of the
    sorted distinct ``<dtype> <shape> <sha256 of the bytes>`` lines of every tensor of its safetensors files."""
    import hashlib

    from safetensors.numpy import load_file

    lines = {f"{array.dtype} {tuple(array.shape)} {hashlib.sha256(array.tobytes()).hexdigest()}"
             for path in sorted(Path(checkpoint).glob("*.safetensors")) for array in load_file(path).values()}
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


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
