"""A model behind an OpenAI-compatible endpoint, scored over HTTP: ``transport`` (requests to the endpoint, within
bounds, retried, the API key kept to its origin and scrubbed from what the server sends), ``openai_chat`` (the chat
completions protocol: a row's request, the ``top_logprobs`` probe, option logits), ``prompt_logprobs`` (the exact
option log-likelihoods of a server that scores prompts: vLLM), ``context`` (the model's context and a prompt's
tokens, known from numbers) and ``scorer`` (``ServedScorer``: connects, chooses the model and its protocol, answers
rows). A tunable is read from the module that defines it."""

from __future__ import annotations

from laya_robustness.scoring.served.context import ContextExceeded, exceeds_context
from laya_robustness.scoring.served.openai_chat import (
    MAX_ANSWER_CHARS,
    MAX_TOKENS,
    OpenAIChat,
    data_url,
    first_answer_token,
    kept_answer,
    option_logits,
)
from laya_robustness.scoring.served.prompt_logprobs import PromptLogprobs
from laya_robustness.scoring.served.scorer import PROTOCOLS, ServedScorer
from laya_robustness.scoring.served.transport import (
    MAX_REPLY_BYTES,
    RETRIES,
    CredentialsRefused,
    EndpointError,
    EndpointUnreachable,
    RedirectRefused,
    Transport,
    endpoint_parts,
    visible,
)

__all__ = [
    "MAX_ANSWER_CHARS", "MAX_REPLY_BYTES", "MAX_TOKENS", "PROTOCOLS", "RETRIES", "ContextExceeded",
    "CredentialsRefused", "EndpointError", "EndpointUnreachable", "OpenAIChat", "PromptLogprobs", "RedirectRefused",
    "ServedScorer", "Transport", "data_url", "endpoint_parts", "exceeds_context", "first_answer_token", "kept_answer",
    "option_logits", "visible",
]
