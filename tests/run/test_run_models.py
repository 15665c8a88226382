"""What a run knows about its models is one frozen value found once from its settings (``run.models.RunModels``);
the scorers are a pool of their own (``run.scorers.ScorerPool``), and an executor returns the identities of the
scorers it loads elsewhere (``Executor.identities``) instead of writing them into the run."""

import dataclasses
from pathlib import Path

import pytest

from laya_robustness.embedded import EMBEDDED_DUAL_MODEL, EMBEDDED_MODEL
from laya_robustness.run.executors.local import LocalExecutor
from laya_robustness.run.executors.registry import register_executor, unregister_executor
from laya_robustness.run.gate_run import GateRun
from laya_robustness.run.inputs.options import parse_settings
from laya_robustness.run.models import RunModels
from laya_robustness.run.pipeline.scorer_sources import identity_key

ROOT = Path(__file__).resolve().parents[2]


def models_of(**given) -> RunModels:
    settings = parse_settings({f"--{k.replace('_', '-')}": v for k, v in given.items()}, root=ROOT)
    return RunModels.of(settings, ROOT)


def test_the_embedded_default_s_models():
    models = models_of()
    assert models.name == EMBEDDED_MODEL and models.model == str(ROOT / EMBEDDED_MODEL)
    assert models.embedded_model and not models.own_data and not models.is_dual and not models.served
    assert models.dual_model == str(ROOT / EMBEDDED_DUAL_MODEL)
    assert models.source_model("captions") == models.dual_model and models.source_model("rows") == models.model
    assert models.skip_reason("text") is None and models.skip_reason("lgip_paraphrase") is None


def test_one_s_own_rows_get_no_dual_encoder_unless_asked(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "question": "q?", "options": ["x", "y"], "label": 0}\n')
    models = models_of(data=str(rows))
    assert models.own_data and models.dual_model is None
    assert f"--dual-model {EMBEDDED_DUAL_MODEL}" in models.skip_reason("lgip_paraphrase")
    assert models_of(data=str(rows), dual_model=EMBEDDED_DUAL_MODEL).dual_model == str(ROOT / EMBEDDED_DUAL_MODEL)


def test_a_dual_encoder_answers_no_questions_and_is_its_own_dual_encoder():
    models = models_of(model=EMBEDDED_DUAL_MODEL)
    assert models.is_dual and models.dual_model == models.model
    assert "is a dual encoder: it answers no questions" in models.skip_reason("text")


def test_a_served_model_probes_no_dual_encoder():
    models = models_of(scorer="openai", endpoint="http://127.0.0.1:9/v1")
    assert models.served and models.model == models.name and models.dual_model is None  # the server's model id
    assert "a chat model behind a server does not give" in models.skip_reason("lgip_paraphrase")


def test_the_run_s_models_are_a_frozen_value_found_once():
    run = GateRun(parse_settings({"--limitations": "none"}, root=ROOT), root=ROOT)
    try:
        assert run.models == RunModels.of(run.settings, ROOT)
        with pytest.raises(dataclasses.FrozenInstanceError):
            run.models.dual_model = None
    finally:
        run.close()


class HoldsElsewhere(LocalExecutor):
    """Scores here, and says it loaded a scorer elsewhere (as a Ray pool does), with an identity of its own."""

    def identities(self):
        return {identity_key("cpu", "captions"): {"model": "held elsewhere"}}


def test_an_executor_returns_the_identities_it_holds_and_the_run_reads_them():
    register_executor("holds-elsewhere", HoldsElsewhere)
    try:
        run = GateRun(parse_settings({"--limitations": "none", "--executor": "holds-elsewhere"}, root=ROOT),
                      root=ROOT)
        try:
            assert run.identities == {identity_key("cpu", "captions"): {"model": "held elsewhere"}}
            run.scorers.scorer("cpu")  # loaded here: its identity is the pool's own
            assert set(run.identities) == {identity_key("cpu", "rows"), identity_key("cpu", "captions")}
            assert run.identities[identity_key("cpu", "rows")]["weights_sha256"]
        finally:
            run.close()
    finally:
        unregister_executor("holds-elsewhere")
