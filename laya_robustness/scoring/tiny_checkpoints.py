"""Tiny random checkpoints of every supported architecture, built offline from a config, a tokenizer and a PIL processor.

Each builder writes a directory that ``load_scorer("hf", path)`` loads like a hub checkpoint:
``config.json`` + ``model.safetensors`` and the processor files (tokenizer, image processor, chat
template). The tokenizer is the embedded default's byte-level BPE (``laya_fixtures/tiny-smolvlm``)
with the special tokens each architecture needs; the weights are random (seeded), so the
checkpoints test the scoring mechanics, not answers. Example::

    from laya_robustness.scoring.tiny_checkpoints import build_checkpoint
    path = build_checkpoint("llava", "/tmp/tiny-llava")   # then: pytest robustness_tests --model /tmp/tiny-llava
"""

from __future__ import annotations

import json
from pathlib import Path

from laya_robustness.scoring.loading import without_video_processor

BASE_TOKENIZER = Path(__file__).resolve().parents[2] / "laya_fixtures" / "tiny-smolvlm" / "tokenizer.json"
SEED = 0
# Tiny text and vision sizes shared by every architecture (fp32 on CPU in milliseconds).
# A wide initialisation makes random attention sharp, so a wrong mask or position shows in the logits.
INIT = 0.2
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 1024, "initializer_range": INIT}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "initializer_range": INIT}

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ IMAGE }}"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEMPLATES = {
    # llava-hf/llava-1.5: "USER: <image>\n<text> ASSISTANT:"
    "llava": ("{% for message in messages %}{{ message['role'].upper() + ': ' }}"
              "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\n' }}"
              "{% else %}{{ item['text'] + ' ' }}{% endif %}{% endfor %}{% endfor %}"
              "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"),
    # llava-v1.6-mistral: "[INST] <image>\n<text> [/INST]"
    "llava_next": ("{% for message in messages %}{{ '[INST] ' }}{% for item in message['content'] %}"
                   "{% if item['type'] == 'image' %}{{ '<image>\n' }}{% else %}{{ item['text'] }}{% endif %}"
                   "{% endfor %}{{ ' [/INST]' }}{% endfor %}"),
    "llava_onevision": CHATML_TEMPLATE.replace("{{ IMAGE }}", "<image>\n"),
    "qwen2_vl": CHATML_TEMPLATE.replace("{{ IMAGE }}", "<|vision_start|><|image_pad|><|vision_end|>"),
    "idefics2": ("{% for message in messages %}{{ message['role'] | capitalize }}:"
                 "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>' }}"
                 "{% else %}{{ item['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
                 "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"),
    # Gemma 3: the template writes <bos> itself (and the tokenizer adds one too unless told not to).
    "gemma3": ("{{ bos_token }}{% for message in messages %}<start_of_turn>"
               "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
               "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
               "{% else %}{{ item['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
               "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"),
}
TEMPLATES["qwen2_5_vl"] = TEMPLATES["qwen2_vl"]


def tokenizer(*, bos: str, eos: str, pad: str, special: tuple[str, ...] = (), named: dict | None = None,
              add_bos: bool = False):
    """The embedded BPE tokenizer with these special tokens (``named``: attributes such as ``image_token``)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer.from_file(str(BASE_TOKENIZER))
    wanted = [bos, eos, pad, *special, *(named or {}).values()]
    core.add_special_tokens([t for t in dict.fromkeys(wanted) if core.token_to_id(t) is None])
    if add_bos:
        core.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                            special_tokens=[(bos, core.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token=eos, pad_token=pad,
                                   unk_token=pad, extra_special_tokens=dict(named or {}), model_max_length=4096,
                                   padding_side="right")


def _text(tok, **extra) -> dict:
    return {**TEXT, "vocab_size": len(tok), "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "tie_word_embeddings": False, **extra}


def _ids(tok, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]


# -- one builder per architecture: (config, processor) -----------------------------------------------

def _idefics3(split: bool):
    from transformers import Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = tokenizer(bos="<|im_start|>", eos="<end_of_utterance>", pad="<|endoftext|>",
                    special=("<fake_token_around_image>", "<image>", "<global-img>",
                             *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))))
    size, patch, scale = 32, 8, 2
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True, size={"longest_edge": 2 * size if split else size}, max_image_size={"longest_edge": size},
        do_image_splitting=split, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    from laya_robustness.tiny_model import CHAT_TEMPLATE

    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok,
                                  image_seq_len=(size // patch) ** 2 // scale**2, chat_template=CHAT_TEMPLATE)
    config = Idefics3Config(vision_config={**VISION, "image_size": size, "patch_size": patch},
                            text_config=_text(tok, model_type="llama"), scale_factor=scale,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=False,
                            pad_token_id=tok.pad_token_id)
    return config, processor


def _idefics2():
    from transformers import Idefics2Config, Idefics2Processor
    from transformers.models.idefics2.image_processing_pil_idefics2 import Idefics2ImageProcessorPil

    tok = tokenizer(bos="<s>", eos="<end_of_utterance>", pad="<unk>",
                    special=("<fake_token_around_image>", "<image>"), add_bos=True)
    size, latents = 32, 8
    image_processor = Idefics2ImageProcessorPil(do_resize=True, size={"shortest_edge": size, "longest_edge": size},
                                                do_image_splitting=False, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Idefics2Processor(image_processor=image_processor, tokenizer=tok, image_seq_len=latents,
                                  chat_template=TEMPLATES["idefics2"])
    config = Idefics2Config(
        vision_config={**VISION, "image_size": size, "patch_size": 8},
        perceiver_config={"hidden_size": TEXT["hidden_size"], "resampler_n_latents": latents, "resampler_depth": 1,
                          "resampler_n_heads": 2, "resampler_head_dim": 16, "num_key_value_heads": 1},
        text_config=_text(tok, model_type="mistral", sliding_window=None),
        image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=False)
    return config, processor


def _clip_vision(size: int) -> dict:
    return {**VISION, "model_type": "clip_vision_model", "image_size": size, "patch_size": 8, "projection_dim": 32}


def _llava():
    from transformers import LlavaConfig, LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    tok = tokenizer(bos="<s>", eos="</s>", pad="<pad>", special=("<image>",), add_bos=True)
    size = 32
    image_processor = LlavaImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                             image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=8,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=TEMPLATES["llava"])
    config = LlavaConfig(vision_config=_clip_vision(size), text_config=_text(tok, model_type="llama"),
                         image_token_index=tok.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default", vision_feature_layer=-2)
    return config, processor


PINPOINTS = [[32, 64], [64, 32], [64, 64]]


def _llava_next():
    from transformers import LlavaNextConfig, LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    tok = tokenizer(bos="<s>", eos="</s>", pad="<pad>", special=("<image>",), add_bos=True)
    size = 32
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                                 image_grid_pinpoints=PINPOINTS, image_mean=[0.5] * 3,
                                                 image_std=[0.5] * 3)
    processor = LlavaNextProcessor(image_processor=image_processor, tokenizer=tok, patch_size=8,
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                   chat_template=TEMPLATES["llava_next"])
    config = LlavaNextConfig(vision_config=_clip_vision(size), text_config=_text(tok, model_type="mistral",
                                                                                 sliding_window=None),
                             image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=PINPOINTS,
                             vision_feature_select_strategy="default", vision_feature_layer=-2)
    return config, processor


def _siglip_vision(size: int) -> dict:
    return {**VISION, "model_type": "siglip_vision_model", "image_size": size, "patch_size": 8}


def _llava_onevision():
    from transformers import LlavaOnevisionConfig
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor

    tok = tokenizer(bos="<|im_start|>", eos="<|im_end|>", pad="<|endoftext|>", special=("<image>", "<video>"))
    size = 32
    image_processor = LlavaOnevisionImageProcessorPil(size={"height": size, "width": size},
                                                      image_grid_pinpoints=PINPOINTS, image_mean=[0.5] * 3,
                                                      image_std=[0.5] * 3)
    processor = without_video_processor(LlavaOnevisionProcessor)(
        image_processor=image_processor, tokenizer=tok, video_processor=None, num_image_tokens=(size // 8) ** 2,
        vision_feature_select_strategy="full", chat_template=TEMPLATES["llava_onevision"])
    config = LlavaOnevisionConfig(vision_config=_siglip_vision(size), text_config=_text(tok, model_type="qwen2"),
                                  image_token_index=tok.convert_tokens_to_ids("<image>"),
                                  video_token_index=tok.convert_tokens_to_ids("<video>"),
                                  image_grid_pinpoints=PINPOINTS, vision_feature_select_strategy="full",
                                  vision_feature_layer=-1, vision_aspect_ratio="anyres_max_9")
    return config, processor


def _qwen2_vl(model_type: str):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if model_type == "qwen2_vl":
        from transformers import Qwen2VLConfig as Config
        from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor as Processor

        vision = {"depth": 2, "embed_dim": 32, "hidden_size": TEXT["hidden_size"], "num_heads": 2, "patch_size": 8,
                  "spatial_merge_size": 2, "temporal_patch_size": 2, "mlp_ratio": 2}
    else:
        from transformers import Qwen2_5_VLConfig as Config
        from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor as Processor

        vision = {"depth": 2, "hidden_size": 32, "out_hidden_size": TEXT["hidden_size"], "intermediate_size": 64,
                  "num_heads": 2, "patch_size": 8, "spatial_merge_size": 2, "temporal_patch_size": 2,
                  "window_size": 32, "fullatt_block_indexes": [1]}
    tok = tokenizer(bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>",
                    special=("<|im_start|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"))
    image_processor = Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2,
                                               min_pixels=16 * 16, max_pixels=48 * 48,
                                               image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = without_video_processor(Processor)(image_processor=image_processor, tokenizer=tok,
                                                   video_processor=None, chat_template=TEMPLATES[model_type])
    text = _text(tok, model_type=f"{model_type}_text",
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    config = Config(vision_config=vision, text_config=text,
                    image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                    video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                    vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
                    vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"), tie_word_embeddings=False)
    return config, processor


def _paligemma():
    from transformers import PaliGemmaConfig, PaliGemmaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    tok = tokenizer(bos="<bos>", eos="<eos>", pad="<pad>", special=("<image>",))
    size = 32
    image_processor = SiglipImageProcessorPil(size={"height": size, "width": size}, image_mean=[0.5] * 3,
                                              image_std=[0.5] * 3)
    image_processor.image_seq_length = (size // 8) ** 2
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tok)
    text = _text(tok, model_type="gemma", head_dim=16, final_logit_softcapping=None)
    config = PaliGemmaConfig(vision_config={**_siglip_vision(size), "projection_dim": TEXT["hidden_size"]},
                             text_config=text, image_token_index=tok.convert_tokens_to_ids("<image>"),
                             projection_dim=TEXT["hidden_size"], hidden_size=TEXT["hidden_size"],
                             vocab_size=len(tok), tie_word_embeddings=False)
    return config, processor


def _gemma3():
    from transformers import Gemma3Config, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tok = tokenizer(bos="<bos>", eos="<eos>", pad="<pad>", special=("<start_of_turn>", "<end_of_turn>"),
                    named=named, add_bos=True)
    size, tokens_per_image = 32, 4
    image_processor = Gemma3ImageProcessorPil(size={"height": size, "width": size}, image_mean=[0.5] * 3,
                                              image_std=[0.5] * 3, do_pan_and_scan=False)
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tok, image_seq_length=tokens_per_image,
                                chat_template=TEMPLATES["gemma3"])
    text = _text(tok, model_type="gemma3_text", head_dim=16, sliding_window=8, final_logit_softcapping=None,
                 layer_types=["sliding_attention", "full_attention"])
    boi, eoi, image = _ids(tok, *named.values())
    config = Gemma3Config(vision_config=_siglip_vision(size), text_config=text, mm_tokens_per_image=tokens_per_image,
                          boi_token_index=boi, eoi_token_index=eoi, image_token_index=image, tie_word_embeddings=False)
    return config, processor


BUILDERS = {
    "idefics3": lambda: _idefics3(split=True),
    "idefics2": _idefics2,
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_onevision": _llava_onevision,
    "qwen2_vl": lambda: _qwen2_vl("qwen2_vl"),
    "qwen2_5_vl": lambda: _qwen2_vl("qwen2_5_vl"),
    "paligemma": _paligemma,
    "gemma3": _gemma3,
}
ARCHITECTURES = tuple(BUILDERS)


def build_model(config, seed: int = SEED):
    """A freshly initialised image-text-to-text model for ``config`` (eager attention), seeded without global state."""
    import torch
    from transformers import AutoModelForImageTextToText

    config._attn_implementation = "eager"
    config.initializer_range = INIT
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, attn_implementation="eager")
    finally:
        torch.random.set_rng_state(state)
    # Weight matrices some architectures start at zero (Gemma 3's image projection) get noise too,
    # so every image token carries its own features.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.ndim >= 2 and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * INIT)
    return model.eval()


def save_processor(processor, out_dir: Path) -> None:
    """The processor's files; one without a video processor is saved piece by piece (same files otherwise)."""
    if getattr(processor, "video_processor", True) is not None:
        processor.save_pretrained(out_dir)
        return
    processor.tokenizer.save_pretrained(out_dir)
    processor.image_processor.save_pretrained(out_dir)
    if processor.chat_template:
        (out_dir / "chat_template.jinja").write_text(processor.chat_template)
    extra = {k: v for k, v in processor.to_dict().items()
             if k not in ("image_processor", "tokenizer", "video_processor", "chat_template")}
    (out_dir / "processor_config.json").write_text(json.dumps(extra, indent=2, sort_keys=True) + "\n")


def build_checkpoint(architecture: str, out_dir: str | Path, seed: int = SEED) -> Path:
    """Build, seed and save the tiny ``architecture`` checkpoint (model + processor) into ``out_dir``."""
    if architecture not in BUILDERS:
        raise KeyError(f"no tiny builder for {architecture!r} (known: {', '.join(ARCHITECTURES)})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config, processor = BUILDERS[architecture]()
    build_model(config, seed).save_pretrained(out)
    save_processor(processor, out)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m laya_robustness.scoring.tiny_checkpoints ARCHITECTURE OUT_DIR [--seed N]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m laya_robustness.scoring.tiny_checkpoints",
                                     description="Build a tiny random checkpoint of a supported architecture.")
    parser.add_argument("architecture", choices=ARCHITECTURES)
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    print(build_checkpoint(args.architecture, args.out, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
