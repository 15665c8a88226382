"""A model object scored as it stands (``HFVLMScorer.from_model``): bitwise the logits and the identity of its
checkpoint loaded from its directory, its modules' modes put back after every call, no autograd graph, and errors
that name the argument."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from laya_robustness.families import build_variants
from laya_robustness.scoring.base import ScoringError, UnsupportedArchitecture
from laya_robustness.scoring.factory import load_scorer
from laya_robustness.scoring.hf import IN_MEMORY, HFVLMScorer
from laya_robustness.scoring.loading import load_model, load_processor

from helpers.paths import EMBEDDED_MODEL


@pytest.fixture(scope="module")
def loaded():
    """The embedded checkpoint loaded as a user would (fp32, eager attention), outside any scorer."""
    return load_model(str(EMBEDDED_MODEL), "eager"), load_processor(str(EMBEDDED_MODEL))


@pytest.fixture(scope="module")
def rows(fixture_rows):
    source = fixture_rows["colour_choice"][:3] + fixture_rows["exists_yesno"][:3]
    return (source + build_variants("option_order", source, seed=0)[:3] + build_variants("image", source, seed=0)[:3]
            + build_variants("text_only", source, seed=0)[:2])


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def _scored(scorer, rows) -> dict:
    return {"batch": scorer.score_batch(rows), "unshared": scorer.score_batch_unshared(rows),
            "predict": scorer.score_predict(rows), "predict_no_cache": scorer.score_predict(rows, use_cache=False)}


def test_an_in_memory_model_scores_bitwise_as_its_directory(embedded_scorer, loaded, rows):
    model, processor = loaded
    in_memory = HFVLMScorer.from_model(model, processor)
    from_directory = embedded_scorer.replaced()  # empty caches: the same calls count the same
    ours, theirs = _scored(in_memory, rows), _scored(from_directory, rows)
    assert all(_same(ours[path], theirs[path]) for path in ours), [p for p in ours if not _same(ours[p], theirs[p])]
    assert in_memory.stats == from_directory.stats
    assert in_memory.model is model and in_memory.device == "cpu"


def test_its_identity_is_its_directorys(embedded_scorer, loaded, monkeypatch):
    model, processor = loaded
    assert HFVLMScorer.from_model(model, processor).identity == embedded_scorer.identity
    assert load_scorer("hf", model, processor=processor).identity == embedded_scorer.identity
    monkeypatch.setattr(model.config, "_name_or_path", "")
    nameless = HFVLMScorer.from_model(model, processor).identity
    assert nameless["model"] == IN_MEMORY and nameless["weights_sha256"] == embedded_scorer.identity["weights_sha256"]


def test_the_model_is_in_eval_mode_while_scoring_and_its_modes_are_put_back(loaded, rows):
    model, processor = loaded
    seen = []
    hook = model.model.text_model.register_forward_hook(
        lambda module, args, out: seen.append((module.training, torch.is_grad_enabled(),
                                               torch.is_inference_mode_enabled())))
    model.train()
    model.model.vision_model.eval()  # a frozen part stays as the caller left it
    try:
        scorer = HFVLMScorer.from_model(model, processor)
        assert model.training
        scorer.score_batch(rows[:4])
        scorer.score_predict(rows[:2])
        scorer.layer_states(rows[:2])
        scorer.generate(rows[:1], max_new_tokens=2)
        assert model.training and model.model.text_model.training and not model.model.vision_model.training
        scorer.adapter.image_features = lambda *args: (_ for _ in ()).throw(RuntimeError("broken encoder"))
        with pytest.raises(ScoringError, match="broken encoder"):
            scorer.score_batch(rows[9:11])  # the image family's new images: the encoder runs and fails
        assert model.training and not model.model.vision_model.training
    finally:
        hook.remove()
        model.eval()
    # in eval mode, autograd off by no_grad (not inference mode: the weights stay trainable)
    assert seen and set(seen) == {(False, False, False)}


def test_scoring_builds_no_autograd_graph_and_leaves_the_weights_trainable(loaded, rows):
    model, processor = loaded
    scorer = HFVLMScorer.from_model(model, processor)
    outputs = []
    hook = model.model.text_model.register_forward_hook(lambda module, args, out: outputs.append(out.last_hidden_state))
    try:
        scorer.score_batch(rows[:4])
        scorer.score_predict(rows[:2])
    finally:
        hook.remove()
    assert outputs and not any(t.requires_grad or t.grad_fn is not None or t.is_inference() for t in outputs)
    assert all(p.grad is None for p in model.parameters())
    kept = [scorer._feature_store.get(key) for key in scorer._feature_store.keys()]
    assert kept and not any(t.is_inference() for t in kept)
    encoded = scorer.encode(rows[0])  # a training step after scoring runs and reaches the weights
    ids = torch.tensor([encoded.prompt_ids])
    loss = model(input_ids=ids, pixel_values=encoded.pixel_values[None],
                 pixel_attention_mask=encoded.pixel_mask[None].bool()).logits.float().logsumexp(-1).mean()
    loss.backward()
    assert any(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=True)


def test_replaced_shares_the_weights_of_an_in_memory_model(loaded, rows):
    model, processor = loaded
    scorer = HFVLMScorer.from_model(model, processor)
    other = scorer.replaced(precision="bf16", prefix_cache_bytes=0)
    assert other.model is model and other.in_memory and other.batch_precision() == "bf16"
    assert len(other.score_batch(rows[:2])) == 2 and not other.shares_prefixes


def test_a_wrong_device_or_a_missing_processor_is_named(loaded):
    model, processor = loaded
    with pytest.raises(ValueError, match=r"device 'cuda:1' is not the model's own device 'cpu'"):
        HFVLMScorer.from_model(model, processor, device="cuda:1")
    with pytest.raises(ValueError, match="device 'nowhere'"):
        HFVLMScorer.from_model(model, processor, device="nowhere")
    assert HFVLMScorer.from_model(model, processor, device="cpu").device == "cpu"
    with pytest.raises(TypeError, match="processor"):
        HFVLMScorer.from_model(model, None)
    with pytest.raises(TypeError, match="processor"):
        load_scorer("hf", model)
    with pytest.raises(ValueError, match="processor"):
        load_scorer("hf", str(EMBEDDED_MODEL), processor=processor)


def test_an_unsupported_architecture_is_refused_as_from_pretrained_refuses_it():
    model = SimpleNamespace(config=SimpleNamespace(model_type="no_such_vlm", architectures=["NoSuchVLM"]))
    with pytest.raises(UnsupportedArchitecture, match="'no_such_vlm'.*not supported by the hf scorer"):
        HFVLMScorer.from_model(model, processor=object())


def test_a_model_in_memory_with_another_attention_kernel_is_said_once(caplog, tmp_path):
    import laya_robustness

    model, processor = load_model(str(EMBEDDED_MODEL), "sdpa"), load_processor(str(EMBEDDED_MODEL))
    arguments = {"families": ["option_order"], "rows_per_set": 2, "invariance": False}
    with caplog.at_level("WARNING", logger="laya_robustness"):
        laya_robustness.run_gate(model, processor=processor, **arguments)
    said = [r.getMessage() for r in caplog.records if "runs attention" in r.getMessage()]
    assert said == ["robustness gate: the model in memory runs attention 'sdpa', not the gate's 'eager': its "
                    "numbers differ from the checkpoint's under 'eager' in their last digits (about the 6th decimal), "
                    "and a snapshot of it is another configuration's (attn_implementation='sdpa' names it)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="laya_robustness"):  # the same kernel as the gate's: nothing said
        laya_robustness.run_gate(load_model(str(EMBEDDED_MODEL), "eager"), processor=processor, **arguments)
    assert not [r for r in caplog.records if "runs attention" in r.getMessage()]


def test_a_caption_family_asked_of_a_model_in_memory_leaves_the_question_families_judged(loaded, tmp_path):
    """A model in memory has no checkpoint path: asking for a caption family (the default ``families`` of a callback
    holds them) does not break the gate; with no dual encoder it probes nothing, and the question families are
    judged."""
    from helpers.paths import ROOT

    from laya_robustness.training import RobustnessCallback

    model, processor = loaded
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", root=ROOT, report_dir=tmp_path,
                                  families=["option_order", "lgip_paraphrase"], rows_per_set=2)
    result = callback.gate(model, processor, 1)
    assert ("option_order", "colour_choice") in result.scope.judged
    assert not [cell for cell in result.scope.asked if cell[0] == "lgip_paraphrase"]
