"""The dual-encoder scorer on tiny CLIP and SigLIP models built from config, saved and loaded back."""

import copy
import dataclasses

import numpy as np
import pytest

from laya_robustness.recipes.fixture_captions import generate_captions
from laya_robustness.loaders.captions import caption_row
from laya_robustness.scoring.dual import DualEncoderScorer, dual_encoder_kind
from laya_robustness.scoring.hf import ModelLoadError

from helpers.dual import TEXT_LENGTH, build_dual_encoder
from helpers.paths import EMBEDDED_MODEL
from helpers.weights import tensors_digest


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run as fast on one thread, and stay fast when other processes share the cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("dual")
    return {kind: build_dual_encoder(kind, root / kind) for kind in ("clip", "siglip")}


@pytest.fixture(scope="module", params=["clip", "siglip"])
def scorer(request, checkpoints):
    return DualEncoderScorer.from_pretrained(str(checkpoints[request.param]), batch_size=3)


@pytest.fixture(scope="module")
def caption_rows():
    return generate_captions(4, seed=7)


def test_from_pretrained_loads_the_right_model_and_identity(scorer, checkpoints):
    from transformers import CLIPModel, SiglipModel

    kind = scorer.kind
    assert isinstance(scorer.model, CLIPModel if kind == "clip" else SiglipModel)
    assert type(scorer.image_processor).__name__.endswith("ImageProcessorPil")
    identity = scorer.identity
    assert identity["kind"] == kind and identity["model"] == str(checkpoints[kind])
    assert identity["weights_sha256"] == {"tensors": tensors_digest(checkpoints[kind])}
    assert identity["text_length"] == TEXT_LENGTH
    assert "cosine" in identity["similarity"] and identity["logit_scale"] > 0
    assert (identity["logit_bias"] is None) == (kind == "clip")
    assert identity["logit_bias"] in (None, -2.5)


def test_similarity_is_the_models_own_logit_undone(scorer, caption_rows):
    """An independent reference: the model's forward logits with the logit scale (and bias) taken out."""
    import torch

    rows = caption_rows[:5]
    ours = np.array([s[0] for s in scorer.score_predict(rows)])
    enc = scorer.processor(text=[r.options[0] for r in rows], images=[r.images[0] for r in rows],
                           padding="max_length", max_length=TEXT_LENGTH, return_tensors="pt")
    if scorer.kind == "siglip":
        enc.pop("attention_mask")
    with torch.no_grad():
        out = scorer.model(**enc)
    logits = out.logits_per_image.diagonal().double()
    bias = scorer.model.logit_bias.double() if scorer.kind == "siglip" else 0.0
    reference = ((logits - bias) / scorer.model.logit_scale.double().exp()).detach().numpy()
    np.testing.assert_allclose(ours, reference, atol=2e-6)
    assert np.all(np.abs(ours) <= 1) and np.ptp(ours) > 1e-4


def test_batch_equals_predict_alone_and_repeated(scorer, caption_rows):
    rows = caption_rows
    batch = scorer.score_batch(rows)
    alone = [scorer.score_batch([r])[0] for r in rows]
    predict = scorer.score_predict(rows)
    reversed_batch = scorer.score_batch(rows[::-1])[::-1]
    for b, a, p, r in zip(batch, alone, predict, reversed_batch):
        assert b.shape == (1,)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
        np.testing.assert_allclose(b, p, rtol=0, atol=1e-6)
        np.testing.assert_allclose(b, r, rtol=0, atol=1e-6)
    again = scorer.score_batch(rows)
    assert all(np.array_equal(x, y) for x, y in zip(batch, again))
    assert all(np.array_equal(x, y) for x, y in zip(predict, scorer.score_predict(rows, use_cache=False)))


def test_choice_rows_are_scored_zero_shot_in_label_order(scorer, fixture_rows):
    row = fixture_rows["colour_choice"][0]
    shown = dataclasses.replace(row, display_order=(2, 0, 3, 1))
    logits, shown_logits = scorer.score_batch([row, shown])
    singles = [scorer.score_batch([caption_row("x", "x", "x", row.images[0], o)])[0][0] for o in row.options]
    np.testing.assert_allclose(logits, singles, atol=1e-6)
    np.testing.assert_allclose(shown_logits, logits, atol=1e-6)


def test_rows_need_exactly_one_image(scorer, caption_rows):
    row = caption_rows[0]
    with pytest.raises(ValueError, match=rf"row {row.row_id} \(shape_captions\) has 0 images"):
        scorer.score_batch([dataclasses.replace(row, images=())])
    with pytest.raises(ValueError, match="has 2 images"):
        scorer.score_predict([dataclasses.replace(row, images=row.images * 2)])


def test_each_distinct_image_and_text_is_encoded_once(scorer, caption_rows, monkeypatch):
    seen = {"images": [], "texts": []}
    image_embeddings, text_embeddings = scorer.image_embeddings, scorer.text_embeddings

    def count_images(images):
        seen["images"].append(len(images))
        return image_embeddings(images)

    def count_texts(texts):
        seen["texts"].append(len(texts))
        return text_embeddings(texts)

    monkeypatch.setattr(scorer, "image_embeddings", count_images)
    monkeypatch.setattr(scorer, "text_embeddings", count_texts)
    firsts = list({r.cluster: r for r in reversed(caption_rows)}.values())  # one caption of each image
    rows = firsts + caption_rows[:3] + [dataclasses.replace(caption_rows[0], row_id="copy")]
    assert len(firsts) == 4
    # a copy of an image with the same pixels is the same image
    rows.append(dataclasses.replace(caption_rows[0], row_id="same-pixels", images=(caption_rows[0].images[0].copy(),)))
    scorer.score_predict(rows)
    n_images, n_texts = len({r.cluster for r in rows}), len({r.options[0] for r in rows})
    assert seen == {"images": [n_images], "texts": [n_texts]}
    seen["images"], seen["texts"] = [], []
    scorer.score_batch(rows)  # batch_size 3: the same distinct images and texts, three per forward
    assert sum(seen["images"]) == n_images and max(seen["images"]) <= 3
    assert sum(seen["texts"]) == n_texts and max(seen["texts"]) <= 3


def test_bf16_weights_score_close_to_fp32(scorer, caption_rows):
    import torch

    bf16 = copy.copy(scorer)
    bf16.precision = "bf16"
    bf16.model = copy.deepcopy(scorer.model).to(torch.bfloat16)
    assert bf16.batch_precision() == "bf16" and scorer.batch_precision() == "fp32"
    low, high = bf16.score_batch(caption_rows), scorer.score_batch(caption_rows)
    assert all(np.all(np.isfinite(a)) for a in low)
    assert max(float(np.abs(a - b).max()) for a, b in zip(low, high)) < 0.05


def test_dual_encoder_kind_tells_checkpoints_apart(checkpoints, tmp_path):
    assert dual_encoder_kind(str(checkpoints["clip"])) == "clip"
    assert dual_encoder_kind(str(checkpoints["siglip"])) == "siglip"
    assert dual_encoder_kind(str(EMBEDDED_MODEL)) is None  # the tiny SmolVLM (idefics3)
    assert dual_encoder_kind(str(tmp_path / "absent")) is None
    with pytest.raises(ModelLoadError, match="model_type is not one of"):
        DualEncoderScorer.from_pretrained(str(EMBEDDED_MODEL))
    with pytest.raises(ValueError, match="precision"):
        DualEncoderScorer.from_pretrained(str(checkpoints["clip"]), precision="fp8")
