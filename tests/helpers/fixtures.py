"""The fixtures every test can ask for by name (``tests/conftest.py`` names this module in ``pytest_plugins``)."""

import pytest

from helpers.gate_project import make_gate
from helpers.limits import PASSING_LIMITS
from helpers.paths import EMBEDDED_MODEL, FIXTURE_ROWS
from helpers.threads import note_threads_alive


@pytest.fixture(autouse=True)
def _prefetch_threads_before():
    """The prefetch threads alive before each test are not its own (``helpers.threads.prefetch_threads_left``)."""
    note_threads_alive()


@pytest.fixture(scope="session")
def fixture_rows():
    from laya_robustness.loaders import load_rows

    return load_rows(FIXTURE_ROWS)


@pytest.fixture(scope="session")
def served_model(tmp_path_factory):
    """``transformers serve`` of the embedded checkpoint on 127.0.0.1, one for every served-model test (it comes up
    in about 20 s); stopped at the end of the session (``helpers.served_parts.ServedModel``)."""
    pytest.importorskip("fastapi", reason="the served-model tests need transformers[serving] (the test extra has it)")
    from helpers.served_parts import ServedModel

    model = ServedModel(tmp_path_factory.mktemp("served-model")).start()
    yield model
    model.stop()


@pytest.fixture(scope="session")
def embedded_scorer():
    from laya_robustness.scoring.hf import HFVLMScorer

    return HFVLMScorer.from_pretrained(str(EMBEDDED_MODEL))


@pytest.fixture
def gate(pytester, monkeypatch):
    """A project with the gate's test modules, two small datasets and limits that the fake model passes."""
    return make_gate(pytester, monkeypatch, PASSING_LIMITS)


@pytest.fixture(scope="module")
def firing_rows():
    """Rows on which every variant of every question family fires (as in the headline recomputation)."""
    from laya_robustness.recipes.fixture_rows import generate_rows

    from helpers.rows import varied, what_is, with_user_variants

    return (with_user_variants(varied(generate_rows("colour_choice", 12, seed=5)))
            + with_user_variants(generate_rows("exists_yesno", 12, seed=5))
            + generate_rows("count_choice", 6, seed=5) + generate_rows("left_of_yesno", 6, seed=5)
            + what_is(generate_rows("context_choice", 6, seed=5)))


@pytest.fixture
def one_rank_world():
    """A ``torch.distributed`` world of this process alone (gloo on 127.0.0.1), ended after the test."""
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
