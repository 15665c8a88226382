"""Whether a run's model, rows or captions are the embedded default's is decided once (``embedded.is_embedded``, through
``run.inputs.resolution.embedded_parts`` when the settings are made):
the limits (``auto`` applies the embedded known limitations) and the run's scorers (the embedded dual encoder, the
user's own rows) always agree."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from laya_robustness.embedded import EMBEDDED_DATA, EMBEDDED_LIMITATIONS, EMBEDDED_MODEL, is_embedded
from laya_robustness.run.inputs.resolution import embedded_parts, resolve_limitations
from laya_robustness.gate.limits_file import measured_on
from laya_robustness.run.models import RunModels

ROOT = Path(__file__).resolve().parents[2]
MEASURED = measured_on(ROOT / EMBEDDED_LIMITATIONS)


def scorers(model, data) -> RunModels:
    """The run's models over settings whose embedded parts are found as ``parse_settings`` finds them."""
    embedded = embedded_parts({"model": model, "data": data, "captions": None}, ROOT)
    settings = SimpleNamespace(model=model, model_name=str(model), data=data, captions=None, in_memory=None,
                               scorer="hf", dual_model="auto", executor="local", embedded=embedded,
                               is_embedded=lambda name: name in embedded)
    return RunModels.of(settings, ROOT)


def embedded_says(model, data) -> tuple[bool, bool]:
    """(the limits apply the embedded overlay, the run's scorers take model and rows for the embedded default's)."""
    overlay, _ = resolve_limitations("auto", model, data, root=ROOT, weights=MEASURED)
    run = scorers(model, data)
    return overlay is not None, run.embedded_model and not run.own_data


@pytest.fixture
def linked(tmp_path) -> Path:
    """A folder holding a link to the embedded rows (``rows``)."""
    (tmp_path / "rows").symlink_to(ROOT / EMBEDDED_DATA)
    return tmp_path


@pytest.mark.parametrize("model, data, expected", [
    (ROOT / EMBEDDED_MODEL, ROOT / EMBEDDED_DATA, True),
    (str(ROOT / EMBEDDED_MODEL), str(ROOT / EMBEDDED_DATA) + "/", True),
    (ROOT / "laya_fixtures" / ".." / EMBEDDED_MODEL, "LINK", True),
    (ROOT / "laya_fixtures" / "tiny-smolvlm-seed2", ROOT / EMBEDDED_DATA, False),
    ("HuggingFaceTB/SmolVLM-256M-Instruct", ROOT / EMBEDDED_DATA, False),
    (ROOT / EMBEDDED_MODEL, ROOT / "tests", False),
    (None, ROOT / EMBEDDED_DATA, False),
    (ROOT / EMBEDDED_MODEL, None, False),
])
def test_the_limits_and_the_scorers_agree_on_what_is_the_embedded_default(linked, model, data, expected):
    data = linked / "rows" if data == "LINK" else data
    assert embedded_says(model, data) == (expected, expected)


def test_an_empty_value_is_never_the_embedded_default_even_from_inside_its_folder(monkeypatch):
    # the scorers once resolved "" to the working directory, the limits took it for nothing given
    monkeypatch.chdir(ROOT / EMBEDDED_DATA)
    assert Path("").resolve() == (ROOT / EMBEDDED_DATA).resolve()
    assert not is_embedded("data", "", ROOT)
    assert scorers(ROOT / EMBEDDED_MODEL, "").own_data
    assert embedded_says(ROOT / EMBEDDED_MODEL, "") == (False, False)


def test_a_relative_value_is_read_against_the_working_directory_and_the_default_against_root(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert is_embedded("model", EMBEDDED_MODEL) and is_embedded("model", EMBEDDED_MODEL, ROOT)
    assert not is_embedded("model", EMBEDDED_MODEL, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert not is_embedded("model", EMBEDDED_MODEL, ROOT) and is_embedded("model", EMBEDDED_MODEL, tmp_path)
    assert is_embedded("model", os.path.relpath(ROOT / EMBEDDED_MODEL), ROOT)
