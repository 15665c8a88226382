"""Builds the embedded tiny SmolVLM (Idefics3) model, its byte-level BPE tokenizer and its processor offline."""

from __future__ import annotations

from typing import Iterable

#: SmolVLM's chat template: "<|im_start|>User:<image>text<end_of_utterance>\nAssistant:".
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
                  "<image>", "<global-img>"] + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
VOCAB_SIZE = 512
IMAGE_SIZE = 64
PATCH_SIZE = 8
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2


def build_tokenizer(corpus: Iterable[str]):
    """A byte-level BPE tokenizer (vocab 512) trained on ``corpus``, wrapped as ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(sorted(set(corpus)), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>", unk_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[3:], model_max_length=2048, padding_side="right",
    )


def build_processor(tokenizer):
    """An ``Idefics3Processor`` with the PIL image processor and explicit, unsplit 64 px images."""
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    image_processor = Idefics3ImageProcessorPil(
        do_resize=True, size={"longest_edge": IMAGE_SIZE}, max_image_size={"longest_edge": IMAGE_SIZE},
        do_image_splitting=False, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                             image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)


def build_config(tokenizer):
    """The tiny Idefics3 config (vision 64/2 layers, llama text 128/2 layers, untied embeddings)."""
    from transformers import Idefics3Config

    return Idefics3Config(
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
        text_config={"model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "vocab_size": len(tokenizer), "max_position_embeddings": 512, "tie_word_embeddings": False,
                     "pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
                     "eos_token_id": tokenizer.eos_token_id},
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_model(config, seed: int):
    """A freshly initialised ``Idefics3ForConditionalGeneration`` (eager attention) seeded with ``seed``."""
    import torch
    from transformers import Idefics3ForConditionalGeneration

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    finally:
        torch.random.set_rng_state(state)
    return model
