"""Loading scorers: unsupported architectures, pickled weights, offline hub ids, and the plug-in contract."""

import json
import os
import time

import numpy as np
import pytest

from laya_robustness.scoring import (ModelLoadError, ScorerContractError, ScoringError, UnsupportedArchitecture,
                                     check_scorer, load_scorer)
from laya_robustness.scoring.adapters import SUPPORTED
from laya_robustness.recipes.tiny_checkpoints import build_checkpoint


@pytest.mark.parametrize("model_type, architecture", [
    ("fuyu", "FuyuForCausalLM"),
    ("mllama", "MllamaForConditionalGeneration"),  # images enter through cross-attention, not as tokens
])
def test_an_unsupported_architecture_is_refused_naming_it_and_the_supported_ones(tmp_path, model_type, architecture):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    with pytest.raises(UnsupportedArchitecture) as info:
        load_scorer("hf", str(tmp_path))
    message = str(info.value)
    assert f"'{model_type}'" in message and architecture in message
    assert all(name in message for name in ("idefics3", "llava_next", "qwen2_vl", "paligemma", "gemma3"))
    assert isinstance(info.value, ModelLoadError)


def test_every_family_of_the_issue_has_an_adapter():
    wanted = {"idefics3", "idefics2", "llava", "llava_next", "llava_onevision", "qwen2_vl", "qwen2_5_vl",
              "paligemma", "gemma3"}
    assert wanted <= set(SUPPORTED)


class _Payload:
    """Unpickling this runs a command: what a malicious pytorch_model.bin would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickled_weights_with_code_are_refused(tmp_path):
    import torch

    checkpoint = build_checkpoint("llava", tmp_path / "ckpt")
    (checkpoint / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    torch.save({"model.lm_head.weight": _Payload(marker)}, checkpoint / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="cannot load model") as info:
        load_scorer("hf", str(checkpoint))
    assert "GLOBAL posix.system" in str(info.value)  # refused by torch's weights_only unpickler
    assert not marker.exists()


def test_a_hub_id_missing_from_the_cache_fails_at_once_when_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(ModelLoadError) as info:
        load_scorer("hf", "laya-robustness-tests/no-such-model")
    assert time.monotonic() - started < 2.0
    assert "'laya-robustness-tests/no-such-model' is not in the local Hugging Face cache" in str(info.value)
    assert "HF_HUB_OFFLINE" in str(info.value)


def test_scoring_failures_surface_as_scoring_errors_naming_model_and_rows(embedded_scorer, fixture_rows):
    scorer = embedded_scorer.replaced()

    def broken(*args, **kwargs):
        raise RuntimeError("vision tower on fire")

    scorer.adapter.image_features = broken
    rows = fixture_rows["colour_choice"][:3]
    for call in (scorer.score_batch, scorer.score_predict, scorer.layer_states, scorer.generate):
        with pytest.raises(ScoringError) as info:
            call(rows)
        message = str(info.value)
        assert "tiny-smolvlm" in message and rows[0].row_id in message and "vision tower on fire" in message


# -- the plug-in contract -------------------------------------------------------------------------

class GoodScorer:
    identity = {"model": "m"}

    def score_batch(self, rows):
        return [np.zeros(len(r.options)) for r in rows]

    def score_predict(self, rows, use_cache=True):
        return self.score_batch(rows)


class NoPredict:
    identity = {}

    def score_batch(self, rows):
        return []


class PredictWithoutUseCache(GoodScorer):
    def score_predict(self, rows):
        return []


class IdentityNotADict(GoodScorer):
    identity = ["model"]


class BatchNotCallable(GoodScorer):
    score_batch = "not a method"


def good(model, **kwargs):
    assert set(kwargs) == {"device", "precision", "batch_size", "attn_implementation"}
    return GoodScorer()


def no_predict(model, **kwargs):
    return NoPredict()


def test_a_plugin_that_meets_the_contract_loads(fixture_rows):
    scorer = load_scorer(f"{__name__}:good", "m", device="cpu", batch_size=2)
    assert isinstance(scorer, GoodScorer)
    assert scorer.score_predict(fixture_rows["colour_choice"][:1], use_cache=False)[0].shape == (4,)


@pytest.mark.parametrize("bad, problem", [
    (NoPredict(), "'score_predict(rows)' is missing"),
    (PredictWithoutUseCache(), "must accept the keyword argument 'use_cache'"),
    (IdentityNotADict(), "'identity' must be a dict, got list"),
    (BatchNotCallable(), "'score_batch' is not callable"),
    (object(), "'identity' must be a dict"),
])
def test_each_way_to_break_the_contract_is_named(bad, problem):
    with pytest.raises(ScorerContractError, match="does not meet the Scorer contract") as info:
        check_scorer(bad, "plug-in 'x:y'")
    assert problem in str(info.value) and "plug-in 'x:y'" in str(info.value)


@pytest.mark.parametrize("spec, problem", [
    (f"{__name__}:no_predict", "'score_predict(rows)' is missing"),
    ("no_such_module_anywhere:factory", "cannot import module 'no_such_module_anywhere'"),
    (f"{__name__}:missing_factory", "has no callable 'missing_factory'"),
    ("not-a-spec", "neither 'hf', 'openai' nor 'module:function'"),
])
def test_load_scorer_checks_plugins_when_they_load(spec, problem):
    with pytest.raises(ScorerContractError) as info:
        load_scorer(spec, "m")
    assert problem in str(info.value)
