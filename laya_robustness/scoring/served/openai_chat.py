"""The OpenAI chat-completions protocol of a served model: one chat request per row, its answer mapped to an option
by ``scoring.extraction``, option probabilities only from the ``top_logprobs`` a server returns for the first answer
token. Requests go through a ``Transport``.

- **Request**: one user turn with the row's images as PNG data URLs in row order, then the text
  ``scoring.prompt.user_text`` makes (the question the in-process scorer asks), temperature 0, ``max_tokens`` 16.
  A reply that is no chat completion fails at once (``EndpointError``).
- **Capability**: connecting asks once for ``logprobs`` / ``top_logprobs``; when the reply carries them every answer
  gets option logits (``option_logits``), else the protocol is generation-only (``probabilities`` False).
- **Answers**: the transport scrubs an answer of the API key and makes its control characters visible; a record keeps
  ``MAX_ANSWER_CHARS`` of it; the extraction reads all of it.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from laya_robustness.answers import normalize_answer
from laya_robustness.records import NO_PROBABILITIES
from laya_robustness.rows import LETTERS, Row, image_digest
from laya_robustness.scoring.base import Answer, label_choice, to_label_order
from laya_robustness.scoring.extraction import EXTRACTION_RULES, extract
from laya_robustness.scoring.prompt import user_text
from laya_robustness.scoring.served.transport import EndpointError, Transport

MAX_TOKENS = 16
TOP_LOGPROBS = 20
DATA_URL_CACHE = 4096
PROMPT_FORMAT = ("one user turn: one image_url (a PNG data URL) per image in row order, then scoring.prompt.user_text "
                 "(context, question, options as 'A. red' lines or 'Answer no or yes.'); temperature 0")
PROBABILITIES = "top_logprobs of the first answer token"
#: What a run through this protocol measures (the reports' ``scored``), with probabilities and without.
SCORED, SCORED_TEXT = f"first answer token, top {TOP_LOGPROBS}", "answer text only"
#: The question that decides the capability when connecting (text only: any chat model can answer it).
PROBE_TEXT = "Is this a question?\nAnswer no or yes."
#: The most characters of an answer a record keeps (an answer of ``max_tokens`` 16 is a few dozen); the
#: extraction reads the whole answer before it is cut.
MAX_ANSWER_CHARS = 4000


def kept_answer(text: str) -> str:
    """An answer as a record keeps it: its first ``MAX_ANSWER_CHARS`` characters, and how long it was when longer.

    >>> kept_answer("B"), kept_answer("x" * 5000)[-44:]
    ('B', 'x [... cut: the answer has 5,000 characters]')
    """
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return f"{text[:MAX_ANSWER_CHARS]} [... cut: the answer has {len(text):,} characters]"


def data_url(image) -> str:
    """The image as a lossless PNG data URL (modes PNG cannot hold are converted to RGB)."""
    if image.mode not in ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"):
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def option_logits(top_logprobs: Sequence[Mapping[str, Any]], shown: Sequence[str], primitive: str) -> np.ndarray:
    """Per shown option: log of the summed probability of the listed first tokens that fit it, a token fitting an
    option when (normalised) it begins the option's text or, on a choice row, is its letter. A token that fits
    several options or none counts for none; an option no listed token fits gets the smallest listed
    log-probability, an upper bound of its own.

    >>> option_logits([{"token": " red", "logprob": -0.1}, {"token": " b", "logprob": -2.5}], ("red", "blue"), "choice")
    array([-0.1, -2.5])
    """
    if not top_logprobs:
        raise ValueError("no top_logprobs to read")
    texts = [normalize_answer(o) for o in shown]
    letters = [c.lower() for c in LETTERS[:len(shown)]] if primitive != "noul" else []
    mass = [0.0] * len(shown)
    for entry in top_logprobs:
        token = normalize_answer(str(entry["token"]))
        fits = {i for i, t in enumerate(texts) if token and t.startswith(token)} | {
            i for i, letter in enumerate(letters) if token == letter}
        if len(fits) == 1:
            mass[fits.pop()] += math.exp(float(entry["logprob"]))
    floor = min(float(e["logprob"]) for e in top_logprobs)
    return np.array([math.log(m) if m > 0 else floor for m in mass])


def first_answer_token(reply: Mapping[str, Any]) -> list:
    """The ``top_logprobs`` of the first generated token that is not blank (else of the first), or [] if none;
    ValueError when the reply's ``logprobs`` are not of the OpenAI shape (a list of ``{token, logprob}`` objects
    with a finite logprob: a string, say, is no probabilities).

    >>> first_answer_token({"choices": [{"logprobs": {"content": [{"token": "A", "top_logprobs": "A B"}]}}]})
    Traceback (most recent call last):
      ...
    ValueError: top_logprobs is not a list of {token, logprob} objects with a finite logprob: "A B"
    """
    logprobs = ((reply.get("choices") or [{}])[0] or {}).get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else logprobs
    if not content:
        return []
    if not isinstance(content, list) or not all(isinstance(entry, Mapping) for entry in content):
        raise ValueError(f"logprobs.content is not a list of objects: {json.dumps(content)[:200]}")
    first = next((e for e in content if str(e.get("token", "")).strip()), content[0])
    top = first.get("top_logprobs") or []
    if not isinstance(top, list) or not all(
            isinstance(t, Mapping) and isinstance(t.get("token"), str) and _finite(t.get("logprob")) for t in top):
        raise ValueError("top_logprobs is not a list of {token, logprob} objects with a finite logprob: "
                         f"{json.dumps(top)[:200]}")
    return top


def chat_completion(transport: Transport, body: Mapping[str, Any]) -> dict:
    """The reply of a chat completion request ``body`` through ``transport``; ``EndpointError`` when it is none (no
    list of choices)."""
    reply, _ = transport.call("/chat/completions", body)
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EndpointError(f"{transport.endpoint}/chat/completions: the reply is no chat completion: "
                            f"{transport.scrub(json.dumps(reply), 300)}")
    return reply


def message_text(reply: Mapping[str, Any]) -> str:
    """The text of a chat completion's first choice ("" when it has none)."""
    message = reply["choices"][0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return str(content or "")


def _finite(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an int past the float range
        return False


class OpenAIChat:
    """Rows asked of a served chat model as chat completions through ``transport`` (see the module doc); build it
    with :meth:`connect`."""

    def __init__(self, transport: Transport, model: str | None, max_tokens: int = MAX_TOKENS):
        self.transport, self.model, self.max_tokens = transport, model, max_tokens
        self.probabilities = False
        #: Why there are no probabilities (the server refused logprobs, or sent them malformed), or "".
        self.refused = ""
        self._lock = threading.Lock()
        self._urls: dict[str, str] = {}

    @classmethod
    def connect(cls, transport: Transport, model: str, entry: Mapping[str, Any], server: str,
                max_tokens: int = MAX_TOKENS) -> "OpenAIChat":
        """The protocol of ``model`` with its capability probed. Every OpenAI-compatible endpoint speaks it, whatever
        the model's /v1/models ``entry`` and the ``server`` software, so it never declines: a server that refuses
        logprobs gets it generation-only."""
        protocol = cls(transport, model, max_tokens)
        protocol.probabilities, protocol.refused = protocol._probe()
        return protocol

    def identity(self) -> dict:
        """The protocol's part of the scorer's identity: the prompt, the extraction, ``max_tokens`` and where the
        probabilities come from (or why there are none)."""
        return {"prompt_format": PROMPT_FORMAT, "extraction_rules": EXTRACTION_RULES, "max_tokens": self.max_tokens,
                "scored": SCORED if self.probabilities else SCORED_TEXT,
                "probabilities": PROBABILITIES if self.probabilities else f"none: {NO_PROBABILITIES}{self.refused}"}

    # -- requests -------------------------------------------------------------------------------

    def _chat(self, content: list, max_tokens: int, logprobs: bool) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": content}],
                                "temperature": 0, "max_tokens": max_tokens}
        if logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return chat_completion(self.transport, body)

    def _probe(self) -> tuple[bool, str]:
        """Whether the server returns top_logprobs (and why not, when it refuses them)."""
        text = [{"type": "text", "text": PROBE_TEXT}]
        try:
            return bool(first_answer_token(self._chat(text, 1, logprobs=True))), ""
        except EndpointError as exc:
            self._chat(text, 1, logprobs=False)
            return False, f" (the server refused logprobs: HTTP {exc.status})"  # no URL: the identity keeps no port
        except ValueError as exc:  # logprobs of another shape: no probabilities to read
            return False, f" (the server's logprobs are malformed: {self.transport.scrub(str(exc), 200)})"

    # -- answering rows -------------------------------------------------------------------------

    def _image_url(self, image) -> str:
        key = image_digest(image)
        url = self._urls.get(key)
        if url is None:
            url = data_url(image)
            with self._lock:
                if len(self._urls) >= DATA_URL_CACHE:
                    self._urls.pop(next(iter(self._urls)))
                self._urls[key] = url
        return url

    def content(self, row: Row) -> list[dict]:
        """The row's user turn: its images as PNG data URLs, then its text."""
        images = [{"type": "image_url", "image_url": {"url": self._image_url(im)}} for im in row.images]
        return [*images, {"type": "text", "text": user_text(row)}]

    def _text(self, row: Row, max_tokens: int) -> tuple[str, dict]:
        """The whole answer (scrubbed, control characters visible, not cut) and the reply."""
        reply = self._chat(self.content(row), max_tokens, self.probabilities)
        text = self.transport.scrub(message_text(reply), None, lines=True)
        self.transport.count("rows")
        return text, reply

    def answer(self, row: Row) -> Answer:
        """One row answered: the text (cut to MAX_ANSWER_CHARS once the extraction has read it whole), the option it
        names (label order) and, with probabilities, the logits."""
        text, reply = self._text(row, self.max_tokens)
        extraction = extract(text, row.shown_options, row.primitive)
        logits = None
        if self.probabilities:
            where = f"{self.transport.endpoint}/chat/completions: row {row.row_id}"
            try:
                top = first_answer_token(reply)
            except ValueError as exc:
                raise EndpointError(f"{where}: the reply is malformed: {self.transport.scrub(str(exc))}") from None
            if not top:
                raise EndpointError(f"{where}: the reply has no top_logprobs, though the server returned them when "
                                    "the run started")
            logits = to_label_order(row, option_logits(top, row.shown_options, row.primitive))
        return Answer(kept_answer(text), label_choice(row, extraction.index), extraction.rule, logits)

    def generated(self, row: Row, max_new_tokens: int) -> str:
        """The generated text of ``row``, ``max_new_tokens`` at most, as a record keeps it."""
        return kept_answer(self._text(row, max_new_tokens)[0])
