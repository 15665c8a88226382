"""Tiny random dual encoders (CLIP, SigLIP) built from config with the committed tiny CLIP's tokenizer."""

import contextlib

from helpers.paths import ROOT

# A model's save_pretrained imports DeepSpeed through accelerate where it is installed, and DeepSpeed imports MLflow
# and its namespace packages: imported here, when a test module imports this one, so that a pytester run's snapshot
# of the modules (tests/conftest.py) does not forget part of them, which leaves importlib.metadata finding no
# distribution (and pytest no plugin) for the rest of the session.
with contextlib.suppress(ImportError):
    import deepspeed  # noqa: F401

EMBEDDED_CLIP = ROOT / "laya_fixtures" / "tiny-clip"
#: The text length of the built encoders.
TEXT_LENGTH = 16


def _tokenizer(max_length):
    from laya_robustness.recipes.tiny_clip import build_tokenizer, vocabulary_from

    tokenizer = build_tokenizer(*vocabulary_from(EMBEDDED_CLIP))
    tokenizer.model_max_length = max_length
    return tokenizer


def build_dual_encoder(kind, directory):
    """A tiny random CLIP or SigLIP with the CLIP BPE tokenizer, saved with its processor."""
    import torch
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor, SiglipConfig, SiglipModel, SiglipProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    text = {"vocab_size": 49408, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": TEXT_LENGTH}
    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        if kind == "clip":
            model = CLIPModel(CLIPConfig(text_config={**text, "bos_token_id": 49406, "eos_token_id": 49407,
                                                      "pad_token_id": 49407}, vision_config=vision, projection_dim=8))
            image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
            processor = CLIPProcessor(image_processor=image_processor, tokenizer=_tokenizer(TEXT_LENGTH))
        else:
            model = SiglipModel(SiglipConfig(text_config={**text, "projection_size": 16}, vision_config=vision))
            with torch.no_grad():
                model.logit_bias.fill_(-2.5)
            image_processor = SiglipImageProcessorPil(size={"height": 32, "width": 32})
            processor = SiglipProcessor(image_processor=image_processor, tokenizer=_tokenizer(TEXT_LENGTH))
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory
