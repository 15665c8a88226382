"""The text generator that writes variants: any Hugging Face causal language model with a chat template, run with
batched greedy decoding, and the identity that names it in every line's provenance.

:class:`ChatGenerator` loads a hub id (from the local cache; with ``HF_HUB_OFFLINE`` set, nothing is
downloaded) or a local directory with ``AutoTokenizer`` and ``AutoModelForCausalLM`` (safetensors, or
pickled weights only through ``weights_only`` loading). Each prompt becomes one user message through
the tokenizer's chat template (``add_generation_prompt=True``, ``enable_thinking=False`` for templates
that read it, such as Qwen3's); a batch is left-padded and decoded greedily (``do_sample=False``) for
at most ``max_new_tokens`` new tokens, fp32 on the CPU and bf16 on CUDA. The same prompts in the same
batches give the same texts.

Its ``identity`` is ``{"model", "weights_sha256", "chat_template_sha256", "dtype"}``: ``weights_sha256``
is the sha256 of the sorted ``<key>:<sha256>`` lines of the checkpoint's ``weight_hashes`` (its
``tensors`` digest), so the same weights anywhere have one hash. Any object with an ``identity`` mapping and a ``generate(prompts,
max_new_tokens)`` method returning one text per prompt can stand in (the tests script one).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Protocol, Sequence

from laya_robustness.scoring.base import ModelLoadError
from laya_robustness.scoring.loading import resolve_checkpoint
from laya_robustness.weights import combined_sha256, weight_hashes


class TextGenerator(Protocol):
    """What writes variants: a JSON-ready identity, and one generated text per prompt."""

    identity: Mapping[str, Any]

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]: ...


class ChatGenerator:
    """A causal language model and its tokenizer, generating greedily in batches (see the module doc)."""

    def __init__(self, model, tokenizer, identity: Mapping[str, Any], device: str = "cpu"):
        self.model, self.tokenizer, self.identity, self.device = model.eval(), tokenizer, dict(identity), device

    @classmethod
    def from_pretrained(cls, name_or_path: str, device: str = "cpu") -> "ChatGenerator":
        """Load ``name_or_path``; ModelLoadError when it cannot be found or loaded, or has no chat template."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        local = resolve_checkpoint(str(name_or_path))
        source = str(local) if local is not None else str(name_or_path)
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, weights_only=True).to(device)
        except Exception as exc:
            raise ModelLoadError(f"cannot load language model {name_or_path!r}: {type(exc).__name__}: {exc}") from exc
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ModelLoadError(f"language model {name_or_path!r} has no chat template: variants need a chat "
                                 "(instruction-tuned) model")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        identity = {"model": str(name_or_path),
                    "weights_sha256": combined_sha256(weight_hashes(local)) if local else None,
                    "chat_template_sha256": hashlib.sha256(str(template).encode()).hexdigest(),
                    "dtype": str(dtype).removeprefix("torch.")}
        return cls(model, tokenizer, identity, device)

    def _chat(self, prompt: str) -> str:
        messages = [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  enable_thinking=False)

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy continuation per prompt, decoded without special tokens, in one left-padded batch."""
        import torch
        from transformers import GenerationConfig

        batch = self.tokenizer([self._chat(p) for p in prompts], return_tensors="pt", padding=True,
                               add_special_tokens=False).to(self.device)
        config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens,
                                  pad_token_id=self.tokenizer.pad_token_id,
                                  eos_token_id=self.model.generation_config.eos_token_id or self.tokenizer.eos_token_id)
        with torch.inference_mode():
            out = self.model.generate(**batch, generation_config=config)
        return self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
