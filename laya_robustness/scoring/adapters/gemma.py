"""PaliGemma (a prefix-LM without a chat template) and Gemma 3 (bidirectional attention within each image)."""

from __future__ import annotations

from laya_robustness.rows import Row
from laya_robustness.scoring.adapters.default import Adapter
from laya_robustness.scoring.prompt import user_text


class PaliGemmaAdapter(Adapter):
    """Prefix ``<image>*n <bos> text \\n`` attends bidirectionally; answers are the causal suffix; positions from 1."""

    name = "paligemma"
    model_types = ("paligemma",)
    position_offset = 1
    bidirectional_prompt = True
    softcap_logits = True

    def prompt_text(self, row: Row) -> str:
        if self.chat_template:
            return super().prompt_text(row)
        return f"{self.processor.image_token * len(row.images)}{self.tokenizer.bos_token}{user_text(row)}\n"

    def prompt_format(self) -> str:
        if self.chat_template:
            return super().prompt_format()
        return "PaliGemma prefix: '<image>' per image, <bos>, the context, question and options, then a newline"

    def prompt_text_example(self) -> str:
        return f"{self.tokenizer.bos_token}?\n" if not self.chat_template else super().prompt_text_example()


class Gemma3Adapter(Adapter):
    """The chat template writes ``<bos>`` (no second one); answers end with ``<end_of_turn>``."""

    name = "gemma3"
    model_types = ("gemma3",)
    bidirectional_images = True

    def end_of_answer(self) -> str:
        token = "<end_of_turn>"
        known = self.tokenizer.convert_tokens_to_ids(token)
        return token if known is not None and known != self.tokenizer.unk_token_id else super().end_of_answer()
