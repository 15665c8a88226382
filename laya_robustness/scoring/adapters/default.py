"""The default adapter: how a transformers image-text-to-text model and its processor turn a row into LM inputs.

An adapter answers, for one architecture family: the prompt text of a row (the processor's chat
template), how one image is preprocessed and which text replaces its placeholder (the processor's
own ``_process_images`` / ``replace_image_token``), how the prompt is tokenized, how images become
features (``get_image_features``), the rope positions and bidirectional spans of the prompt, and
the LM head. Subclasses override only what their architecture does differently.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring.prefixes import shared_length
from laya_robustness.scoring.prompt import answer_text, chat_messages


class Adapter:
    """Default behaviour: chat template, per-image preprocessing, causal prompt, 0-based positions, plain head."""

    name = "generic"
    model_types: tuple[str, ...] = ()
    #: Added to every rope position (PaliGemma counts from 1).
    position_offset = 0
    #: The whole prompt attends bidirectionally (a prefix-LM such as PaliGemma).
    bidirectional_prompt = False
    #: Each run of image tokens attends bidirectionally within itself (Gemma 3).
    bidirectional_images = False
    #: Apply ``text_config.final_logit_softcapping`` after the LM head, as the model's own forward does.
    softcap_logits = False
    #: The processor outputs ``prompt_positions`` reads (kept per image after its pixels are dropped).
    layout_inputs: tuple[str, ...] = ()

    def __init__(self, model, processor):
        self.model, self.processor = model, processor
        self.tokenizer = processor.tokenizer
        self.config = model.config
        self.text_config = model.config.get_text_config()
        self.image_token_id = self._image_token_id()
        merged = processor._merge_kwargs(tokenizer_init_kwargs=self.tokenizer.init_kwargs, return_tensors="pt")
        self.images_kwargs = dict(merged["images_kwargs"])
        self.text_kwargs = {k: v for k, v in merged["text_kwargs"].items()
                            if k not in ("return_tensors", "padding", "padding_side", "return_token_type_ids",
                                         "return_mm_token_type_ids", "return_text_replacement_offsets")}
        self.chat_template = getattr(processor, "chat_template", None) or None
        self._vision_params = set(inspect.signature(self.base_model.get_image_features).parameters)

    # -- description --------------------------------------------------------------------------

    @property
    def base_model(self):
        return self.model.model

    @property
    def language_model(self):
        base = self.base_model
        return getattr(base, "language_model", None) or base.text_model

    def identity(self) -> dict:
        """What the reports record about the prompt: template, its hash, the prompt and answer formats."""
        template = self.chat_template
        return {"architecture": self.config.model_type, "adapter": self.name,
                "chat_template": "processor" if template else "none",
                "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16] if template else None,
                "prompt_format": self.prompt_format(), "answer_format": self.answer_format(),
                "prefix_sharing": self.prefix_sharing()}

    @classmethod
    def prefix_sharing(cls) -> str:
        """How rows about the same images share their prompt prefix (the scorer's identity, the terminal header)."""
        if cls.bidirectional_prompt:
            return ("none: the prompt attends bidirectionally (a prefix-LM), so its image tokens see the question; "
                    "every row runs its whole prompt")
        return ("kv-cache: the prompt through its last image token runs once per image; its rows reuse its keys "
                "and values")

    def prompt_format(self) -> str:
        return ("the processor's chat template (add_generation_prompt) over one user turn: one image entry per "
                "image, then the context, the question and the options")

    def answer_format(self) -> str:
        return repr(self.answer_text("{option}", self.prompt_text_example()))

    def prompt_text_example(self) -> str:
        return self._template([{"role": "user", "content": [{"type": "text", "text": "?"}]}])

    # -- text ---------------------------------------------------------------------------------

    def _image_token_id(self) -> int:
        for name in ("image_token_id", "image_token_index"):
            value = getattr(self.config, name, None)
            if isinstance(value, int):
                return value
        token = getattr(self.processor, "image_token", None)
        return self.tokenizer.convert_tokens_to_ids(token)

    def _template(self, messages: list[dict]) -> str:
        if not self.chat_template:
            raise ValueError(f"{self.config.model_type}: the processor has no chat template")
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def prompt_text(self, row: Row) -> str:
        """The row as the model's prompt, with one image placeholder per image (before expansion)."""
        return self._template(chat_messages(row))

    def end_of_answer(self) -> str:
        """The token that ends an answer (the tokenizer's eos)."""
        return self.tokenizer.eos_token or ""

    def answer_text(self, option: str, prompt_text: str) -> str:
        """``" <option><end>"``, or without the space when the prompt already ends in whitespace."""
        return answer_text(option, self.end_of_answer(), "" if prompt_text[-1:].isspace() else " ")

    def tokenize_prompt(self, text: str) -> list[int]:
        """Ids of the expanded prompt, as the processor tokenizes it, without a doubled leading BOS."""
        ids = self.tokenizer(text, **self.text_kwargs)["input_ids"]
        bos, bos_id = self.tokenizer.bos_token, self.tokenizer.bos_token_id
        if bos and bos_id is not None and text.startswith(bos) and ids[:2] == [bos_id, bos_id]:
            ids = ids[1:]  # the template wrote the BOS and the tokenizer added another
        return list(ids)

    def tokenize_answer(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- images -------------------------------------------------------------------------------

    def image_groups(self, images: Sequence) -> list[tuple]:
        """Images preprocessed together: each image alone (its inputs do not depend on the others)."""
        return [(im,) for im in images]

    def process_group(self, images: tuple) -> tuple[dict, list[str]]:
        """The processor's tensors for these images (batch of one row) and each image's placeholder text."""
        layout, *_ = self.processor.prepare_inputs_layout(
            images=list(images), text=[self.processor.image_token * len(images)])
        tensors, replacements = self.processor._process_images(layout, **self.images_kwargs)
        return {k: v for k, v in tensors.items() if k in self._vision_params}, list(replacements)

    def expand(self, text: str, replacements: list[str]) -> str:
        """The prompt with each image placeholder replaced by its image's text, as the processor does."""
        if not replacements:
            return text
        expanded, _ = self.processor.get_text_with_replacements([text], replacements)
        return expanded[0]

    def image_features(self, inputs: dict, images_per_group: list[int]) -> list:
        """Features of a collated batch of groups: one (n_tokens, hidden) tensor per group."""
        out = self.base_model.get_image_features(**inputs, return_dict=True)
        pooled = out.pooler_output
        items = [t.reshape(-1, t.shape[-1]) for t in (list(pooled) if not isinstance(pooled, (list, tuple))
                                                     else pooled)]
        if len(items) == len(images_per_group):
            return items
        if len(items) == sum(images_per_group):
            import torch

            groups, start = [], 0
            for n in images_per_group:
                groups.append(torch.cat(items[start:start + n], dim=0))
                start += n
            return groups
        raise ValueError(f"{len(items)} feature tensors for {len(images_per_group)} image groups "
                         f"({sum(images_per_group)} images)")

    # -- language model -----------------------------------------------------------------------

    def embed(self, ids):
        """Token embeddings; image positions get a placeholder id (their embeddings are replaced)."""
        emb = self.model.get_input_embeddings()
        return emb(ids.masked_fill(ids == self.image_token_id, 0))

    def prompt_positions(self, ids: list[int], groups: list[dict]) -> np.ndarray:
        """(n_dims, P) rope positions of the prompt."""
        return (np.arange(len(ids), dtype=np.int64) + self.position_offset)[None, :]

    def prompt_blocks(self, ids: list[int]) -> np.ndarray:
        """(P,) bidirectional block id of each prompt token (-1: causal)."""
        if self.bidirectional_prompt:
            return np.zeros(len(ids), dtype=np.int64)
        blocks = np.full(len(ids), -1, dtype=np.int64)
        if self.bidirectional_images:
            is_image = np.asarray(ids) == self.image_token_id
            starts = is_image & ~np.concatenate([[False], is_image[:-1]])
            blocks[is_image] = (np.cumsum(starts) - 1)[is_image]
        return blocks

    def prefix_length(self, ids: list[int], blocks: np.ndarray) -> int:
        """Leading prompt tokens that rows about the same images share (``scoring.prefixes``; 0: none)."""
        return 0 if self.bidirectional_prompt else shared_length(ids, blocks, self.image_token_id)

    def sliding_window(self) -> int | None:
        """The window of the model's sliding-attention layers, if it has any."""
        types = getattr(self.text_config, "layer_types", None) or []
        if "sliding_attention" in types:
            return int(self.text_config.sliding_window)
        return None

    def head(self, hidden):
        """Logits of the given hidden states (n, hidden), as the model's forward computes them."""
        logits = self.model.get_output_embeddings()(hidden)
        cap = getattr(self.text_config, "final_logit_softcapping", None) if self.softcap_logits else None
        if cap:
            import torch

            logits = torch.tanh(logits / cap) * cap
        return logits
