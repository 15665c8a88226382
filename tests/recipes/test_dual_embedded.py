"""The committed tiny CLIP loads through the scorer and tells true captions from flipped ones on the fixture set."""

import pytest

from laya_robustness.recipes.fixture_captions import CAPTION_SET
from laya_robustness.loaders.captions import load_captions
from laya_robustness.families.lgip.caption_variants import build_flips, build_paraphrases
from laya_robustness.metrics.lgip import lgip_cell
from laya_robustness.run.pipeline.chunks import prediction_record
from laya_robustness.scoring.dual import DualEncoderScorer, dual_encoder_kind

from helpers.paths import ROOT
from helpers.weights import tensors_digest

EMBEDDED_CLIP = ROOT / "laya_fixtures" / "tiny-clip"
FIXTURE_CAPTIONS = ROOT / "laya_fixtures" / "captions"
#: Limits with a margin around what the committed checkpoint measures on these 200 captions
#: (PR 0.93 / 0.92 / 0.93, E_inv 0.085; the README's "Dual encoders" has the full table).
MIN_PR = {"object": 0.85, "colour": 0.85, "count": 0.85}
MAX_E_INV = 0.15


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run as fast on one thread, and stay fast when other processes share the cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def embedded_clip():
    return DualEncoderScorer.from_pretrained(str(EMBEDDED_CLIP), batch_size=64)


@pytest.fixture(scope="module")
def caption_rows():
    return load_captions(FIXTURE_CAPTIONS)[CAPTION_SET]


def _records(scorer, rows):
    temperatures = {"score": 1.0, "choice": 1.0, "noul": 1.0}
    return [prediction_record(r, s, temperatures) for r, s in zip(rows, scorer.score_batch(rows))]


def test_the_embedded_checkpoint_is_a_tiny_clip(embedded_clip):
    from transformers import CLIPModel

    assert dual_encoder_kind(str(EMBEDDED_CLIP)) == "clip" and isinstance(embedded_clip.model, CLIPModel)
    assert embedded_clip.identity["weights_sha256"] == {"tensors": tensors_digest(EMBEDDED_CLIP)}
    assert embedded_clip.text_length == 32 and embedded_clip.tokenizer.vocab_size == 49408


def test_true_captions_beat_their_flips(embedded_clip, caption_rows):
    rows = caption_rows[:200]  # half of the images: keeps the test fast
    orig = _records(embedded_clip, rows)
    flips = lgip_cell(orig + _records(embedded_clip, build_flips(rows, 0)), seed=0, n_boot=200)["sensitivity"]
    for attribute, floor in MIN_PR.items():
        block = flips["by_attribute"][attribute]
        assert block["pr"] > floor and block["e_sens"] > 0, (attribute, block["pr"], block["e_sens"])
        strengths = block["by_strength"]
        assert strengths["strong"]["pr"] > strengths["weak"]["pr"], (attribute, strengths)  # a harder lie, caught more
    paraphrases = lgip_cell(orig + _records(embedded_clip, build_paraphrases(rows, 0)), seed=0, n_boot=200)
    assert 0 < paraphrases["invariance"]["e_inv"] < MAX_E_INV
