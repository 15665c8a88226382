"""The scorer of a model behind an OpenAI-compatible endpoint (vLLM, SGLang, TGI, ``transformers serve``, hosted
APIs): connecting lists the endpoint's models, chooses one and takes the first of ``protocols()`` that applies to it;
each row is then asked through that protocol, up to ``concurrency`` requests in flight.

An endpoint that cannot be reached when the scorer connects raises ``EndpointUnreachable`` (``stops_run``) within
seconds: nothing can be scored; one that refuses the credentials raises ``CredentialsRefused``. Whether a prompt fits
the model's context is known from numbers (``context``): ``check_context`` says it before rows are asked, and a
server's refusal of a row is ``ContextExceeded`` only where the numbers show it.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Protocol, Sequence

from laya_robustness.registry import Registry
from laya_robustness.rows import Row
from laya_robustness.scoring.base import Answer, ModelLoadError
from laya_robustness.scoring.served.context import ServedContext
from laya_robustness.scoring.served.openai_chat import MAX_TOKENS, OpenAIChat
from laya_robustness.scoring.served.prompt_logprobs import PromptLogprobs
from laya_robustness.scoring.served.transport import RETRIES, CredentialsRefused, EndpointError, Transport

#: How long connecting may wait for the endpoint's model list (twice at most): a dead endpoint stops a run fast.
CONNECT_TIMEOUT_S = 4.0
#: Fields of a /v1/models entry kept in the identity (``created`` is left out: some servers report the time).
SERVER_FIELDS = ("owned_by", "root", "parent", "max_model_len")


class ServedProtocol(Protocol):
    """What the scorer asks of the protocol it speaks with a served model (``OpenAIChat`` is one)."""

    probabilities: bool

    @classmethod
    def connect(cls, transport: Transport, model: str, entry: Mapping[str, Any], server: str,
                max_tokens: int) -> "ServedProtocol | None":
        """The protocol of ``model`` with its capability probed, or None where it does not apply, as the model's
        /v1/models ``entry`` ({} where none), the ``server`` software and its own probe show."""

    def identity(self) -> dict:
        """The protocol's part of the scorer's identity (its prompt, answers and probabilities)."""

    def answer(self, row: Row) -> Answer:
        """One row answered."""

    def generated(self, row: Row, max_new_tokens: int) -> str:
        """The generated text of one row, as a record keeps it."""


#: The built-in protocols a served model may be spoken to in, the most particular first: connecting takes the first
#: whose ``connect`` finds it applies: the exact option log-likelihoods of a server that scores prompts (vLLM), else
#: OpenAI chat, which applies to every OpenAI-compatible endpoint.
PROTOCOLS: tuple[type[ServedProtocol], ...] = (PromptLogprobs, OpenAIChat)
#: The entry points of installed packages that add a protocol (a ``ServedProtocol`` class) by name.
ENTRY_POINT_GROUP = "laya_robustness.protocols"
#: Protocol name -> its class (``registry.Registry``): the built-in ones, then those of the entry points.
SERVED_PROTOCOLS: Registry[type[ServedProtocol]] = Registry("served protocol")
SERVED_PROTOCOLS.add("prompt_logprobs", PromptLogprobs)
SERVED_PROTOCOLS.add("openai_chat", OpenAIChat)


def protocols() -> tuple[type[ServedProtocol], ...]:
    """The protocols connecting tries, in order: those of the ``laya_robustness.protocols`` entry points (by name;
    one that does not load is left out with a ``registry.BrokenEntryWarning`` naming it), then ``PROTOCOLS``."""
    SERVED_PROTOCOLS.load_entry_points(ENTRY_POINT_GROUP)
    return tuple(p for _, p in SERVED_PROTOCOLS.entries() if p not in PROTOCOLS) + PROTOCOLS


class ServedScorer:
    """Answers rows by asking a served model (see the module doc); build it with :meth:`connect`."""

    def __init__(self, endpoint: str, *, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8,
                 timeout_s: float = 60.0, max_tokens: int = MAX_TOKENS, retries: int = RETRIES):
        if concurrency < 1 or timeout_s <= 0 or retries < 0:
            raise ValueError("concurrency must be >= 1, timeout_s > 0 and retries >= 0")
        self.stats = {"requests": 0, "retries": 0, "rows": 0}
        self.transport = Transport(endpoint, api_key_env=api_key_env, timeout_s=timeout_s, retries=retries,
                                   stats=self.stats)
        self.endpoint, self.host, self.api_key_env = self.transport.endpoint, self.transport.host, api_key_env
        self.concurrency, self.timeout_s, self.max_tokens, self.retries = concurrency, timeout_s, max_tokens, retries
        self.model_id: str | None = None
        self.probabilities = False
        self.identity: dict = {}
        self.protocol: ServedProtocol | None = None
        self.context: ServedContext | None = None
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def connect(cls, endpoint: str, model: str | None = None, **kwargs) -> "ServedScorer":
        """A scorer of ``model`` (or of the one model the endpoint lists) with its protocol and capability decided; a
        dead endpoint raises ``EndpointUnreachable`` within seconds, anything else wrong ``ModelLoadError``."""
        scorer = cls(endpoint, **kwargs)
        listed, server = scorer._models()
        scorer.model_id = model = scorer._choose(listed, model)
        entry = next((m for m in listed if m.get("id") == model), {})
        scorer.protocol = protocol = scorer._protocol(model, entry, server)
        scorer.context = ServedContext(scorer.transport, model, entry, scorer.max_tokens)
        scorer.probabilities = protocol.probabilities
        scorer.identity = {
            "model": model, "scorer": "openai", "endpoint_host": scorer.host,
            "server": {"software": server, **{k: scorer._field(entry[k]) for k in SERVER_FIELDS if k in entry}},
            **protocol.identity(),
        }
        return scorer

    def _models(self) -> tuple[list[dict], str]:
        """The endpoint's model list and its Server header (fast: a dead endpoint fails within seconds)."""
        try:
            reply, server = self.transport.call("/models", timeout=CONNECT_TIMEOUT_S, retries=1)
        except EndpointError as exc:
            if exc.status in (401, 403):
                raise CredentialsRefused(f"{self.endpoint}/models refused the credentials (HTTP {exc.status}): "
                                         f"check the key in ${self.api_key_env} (it answered: {exc.detail})") from None
            return [], "unknown"  # a server without a model list: --model must name the model
        listed = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(listed, list):
            return [], server
        return [{**m, "id": self.transport.scrub(str(m["id"]), None)} for m in listed
                if isinstance(m, dict) and "id" in m], server

    def _choose(self, listed: list[dict], model: str | None) -> str:
        """The model to gate: ``model``, which the endpoint must list when it lists any, or the only one listed."""
        names = self.transport.scrub(", ".join(m["id"] for m in listed)) or "none"
        if model is None:
            if len(listed) != 1:
                raise ModelLoadError(f"--model: {self.endpoint}/models lists {len(listed)} models ({names}); "
                                     "name the one to gate with --model")
            return listed[0]["id"]
        if listed and model not in {m["id"] for m in listed}:
            raise ModelLoadError(f"--model: {model!r} is not among the models {self.endpoint}/models lists ({names})")
        return model

    def _protocol(self, model: str, entry: Mapping[str, Any], server: str) -> ServedProtocol:
        """The first of ``protocols()`` that applies to ``model``, connected."""
        for speaks in protocols():
            protocol = speaks.connect(self.transport, model, entry, server, self.max_tokens)
            if protocol is not None:
                return protocol
        raise ModelLoadError(f"{self.endpoint}: no protocol the served scorer speaks applies to {model!r}")

    def _field(self, value: Any) -> Any:
        """A field of a model entry as the identity keeps it: a string scrubbed, a number or bool as it is, anything
        else (a list, a table, an int past 64 bits) as its scrubbed JSON."""
        if isinstance(value, str):
            return self.transport.scrub(value)
        if value is None or isinstance(value, bool) or (isinstance(value, (int, float)) and abs(value) < 2 ** 63):
            return value
        return self.transport.scrub(json.dumps(value))

    # -- answering rows -------------------------------------------------------------------------

    def _each(self, rows: Sequence[Row], work) -> list:
        if len(rows) <= 1:
            return [work(r) for r in rows]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="laya-served")
        return list(self._pool.map(work, rows))

    def _asked(self, row: Row, work):
        """``work(row)``; a refusal the numbers show to be a prompt longer than the context raises
        ``ContextExceeded``."""
        try:
            return work(row)
        except EndpointError as exc:
            beyond = self.context.refusal(exc, row) if self.context is not None else None
            if beyond is None:
                raise
            raise beyond from None

    def check_context(self, rows: Sequence[Row]) -> None:
        """``ContextExceeded`` for the first of ``rows`` whose prompt and answer are known not to fit the model's
        context (nothing where the numbers are not known)."""
        if self.context is not None:
            self.context.check(rows)

    def answer(self, row: Row) -> Answer:
        """One row answered through the protocol: its text, the option it names (label order) and, with
        probabilities, the logits."""
        return self._asked(row, self.protocol.answer)

    def answers(self, rows: Sequence[Row]) -> list[Answer]:
        """Every row answered (up to ``concurrency`` requests in flight), in row order."""
        return self._each(rows, self.answer)

    def generate(self, rows: Sequence[Row], max_new_tokens: int = 16) -> list[str]:
        """The generated text of each row (open-answer rows), ``max_new_tokens`` at most."""
        return self._each(rows, lambda r: self._asked(r, lambda x: self.protocol.generated(x, max_new_tokens)))
