"""Scorer for a model behind an OpenAI-compatible chat endpoint (vLLM, SGLang, TGI, ``transformers serve``, hosted
APIs): one chat request per row, its answer mapped to an option by ``scoring.extraction``, option probabilities only
from the ``top_logprobs`` a server returns for the first answer token.

- **Request**: one user turn with the row's images as PNG data URLs in row order, then the text
  ``scoring.prompt.user_text`` makes (the question the in-process scorer asks), temperature 0, ``max_tokens`` 16.
- **Faults**: up to ``concurrency`` requests are in flight, each with a timeout; a 429, a 5xx, a dropped connection
  or a timeout is retried ``RETRIES`` times with exponential backoff (a ``Retry-After`` is honoured); another error
  reply fails at once (``EndpointError``). An endpoint that cannot be reached when the scorer connects, or whose
  retries run out, raises ``EndpointUnreachable`` (``stops_run``): nothing more can be scored.
- **Capability**: connecting asks once for ``logprobs`` / ``top_logprobs``; when the reply carries them every answer
  gets option logits (``option_logits``), else the scorer is generation-only (``probabilities`` False).
- **Secrets**: the API key is read from the environment variable named by ``api_key_env``, sent as a bearer
  token to the endpoint's origin (scheme, host and port) only: a redirect elsewhere is refused
  (``RedirectRefused``), never followed with the key. Every text a server sends (error bodies, answers, model
  ids, its ``Server`` header) is scrubbed of the key before it is cut to length or kept, so the key is never in
  the identity, a message, an answer or a report.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import numpy as np

from laya_robustness.answers import normalize_answer
from laya_robustness.records import NO_PROBABILITIES
from laya_robustness.rows import LETTERS, Row, image_digest
from laya_robustness.scoring.base import Answer, ModelLoadError, label_choice, to_label_order
from laya_robustness.scoring.extraction import EXTRACTION_RULES, extract
from laya_robustness.scoring.prompt import user_text

MAX_TOKENS = 16
TOP_LOGPROBS = 20
RETRIES = 4
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 30.0
#: How long connecting may wait for the endpoint's model list (twice at most): a dead endpoint stops a run fast.
CONNECT_TIMEOUT_S = 4.0
DATA_URL_CACHE = 4096
PROMPT_FORMAT = ("one user turn: one image_url (a PNG data URL) per image in row order, then scoring.prompt.user_text "
                 "(context, question, options as 'A. red' lines or 'Answer no or yes.'); temperature 0")
PROBABILITIES = "top_logprobs of the first answer token"
#: The question that decides the capability when connecting (text only: any chat model can answer it).
PROBE_TEXT = "Is this a question?\nAnswer no or yes."
#: Fields of a /v1/models entry kept in the identity (``created`` is left out: some servers report the time).
SERVER_FIELDS = ("owned_by", "root", "parent", "max_model_len")


class EndpointUnreachable(RuntimeError):
    """The endpoint cannot be reached, or stopped answering (its retries ran out): the run stops (exit 3)."""

    stops_run = True


class RedirectRefused(EndpointUnreachable):
    """The endpoint redirected a request to another origin: not followed, since the request carries the API key;
    nothing can be scored (exit 3)."""


class EndpointError(RuntimeError):
    """The endpoint answered with an error retrying cannot fix (a 4xx other than 429, a reply that is no chat
    completion): the rows of that call cannot be scored (exit 3). ``status``: the HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _Transient(Exception):
    """A failure worth retrying: 429, 5xx, a dropped or refused connection, a timeout, a reply cut short."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


def endpoint_parts(url: str) -> urllib.parse.SplitResult:
    """The endpoint URL split; ValueError unless it is http(s)://host[:port][/path] with no credentials or query."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s)://host[:port]/path URL")
    if parts.username or parts.password:
        raise ValueError("the URL holds credentials: give the key through --api-key-env instead")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a query or fragment")
    parts.port  # noqa: B018  (a bad port raises ValueError here)
    return parts


def origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL: where a request goes, the default port filled in.

    >>> origin(urllib.parse.urlsplit("https://API.example.com/v1")), origin(urllib.parse.urlsplit("http://h:8/v1"))
    (('https', 'api.example.com', 443), ('http', 'h', 8))
    """
    return parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within ``allowed`` (the endpoint's origin) as urllib does; one to another origin raises
    ``RedirectRefused`` naming both URLs (``scrub``: the scorer's scrubbing of server text)."""

    def __init__(self, allowed: tuple[str, str, int], scrub):
        self.allowed, self.scrub = allowed, scrub

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(urllib.parse.urlsplit(newurl)) != self.allowed:
            fp.close()
            raise RedirectRefused(f"{req.full_url} redirected (HTTP {code}) to {self.scrub(newurl)}, another host or "
                                  "port: not followed, since the request carries the API key; give --endpoint the "
                                  "URL that answers")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


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
    """The ``top_logprobs`` of the first generated token that is not blank (else of the first), or [] if none."""
    content = ((reply.get("choices") or [{}])[0].get("logprobs") or {}).get("content") or []
    for entry in content:
        if str(entry.get("token", "")).strip():
            return list(entry.get("top_logprobs") or [])
    return list(content[0].get("top_logprobs") or []) if content else []


def _retry_after(headers) -> float | None:
    try:
        return min(max(float(headers.get("Retry-After")), 0.0), MAX_RETRY_AFTER_S)
    except (TypeError, ValueError):
        return None


class ServedScorer:
    """Answers rows by asking a served chat model (see the module doc); build it with :meth:`connect`."""

    def __init__(self, endpoint: str, *, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8,
                 timeout_s: float = 60.0, max_tokens: int = MAX_TOKENS, retries: int = RETRIES):
        if concurrency < 1 or timeout_s <= 0 or retries < 0:
            raise ValueError("concurrency must be >= 1, timeout_s > 0 and retries >= 0")
        parts = endpoint_parts(endpoint)
        self.endpoint = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.host = parts.hostname
        self._key = os.environ.get(api_key_env) or None
        self.concurrency, self.timeout_s, self.max_tokens, self.retries = concurrency, timeout_s, max_tokens, retries
        self.model_id: str | None = None
        self.probabilities = False
        self.identity: dict = {}
        self.stats = {"requests": 0, "retries": 0, "rows": 0}
        # never an environment proxy; redirects only within the endpoint's origin
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   _SameOriginRedirects(origin(parts), self._scrub))
        self._lock = threading.Lock()
        self._dead: str | None = None
        self._urls: dict[str, str] = {}
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def connect(cls, endpoint: str, model: str | None = None, **kwargs) -> "ServedScorer":
        """A scorer of ``model`` (or of the one model the endpoint lists) with its capability decided; a dead
        endpoint raises ``EndpointUnreachable`` within seconds, anything else wrong ``ModelLoadError``."""
        scorer = cls(endpoint, **kwargs)
        listed, server = scorer._models()
        scorer.model_id = model = scorer._choose(listed, model)
        entry = next((m for m in listed if m.get("id") == model), {})
        scorer.probabilities, refused = scorer._probe()
        scorer.identity = {
            "model": model, "scorer": "openai", "endpoint_host": scorer.host,
            "server": {"software": server, **{k: scorer._scrub(entry[k]) if isinstance(entry[k], str) else entry[k]
                                              for k in SERVER_FIELDS if k in entry}},
            "prompt_format": PROMPT_FORMAT, "extraction_rules": EXTRACTION_RULES, "max_tokens": scorer.max_tokens,
            "probabilities": PROBABILITIES if scorer.probabilities else f"none: {NO_PROBABILITIES}{refused}",
        }
        return scorer

    def _choose(self, listed: list[dict], model: str | None) -> str:
        """The model to gate: ``model``, which the endpoint must list when it lists any, or the only one listed."""
        names = ", ".join(m["id"] for m in listed) or "none"
        if model is None:
            if len(listed) != 1:
                raise ModelLoadError(f"--model: {self.endpoint}/models lists {len(listed)} models ({names}); "
                                     "name the one to gate with --model")
            return listed[0]["id"]
        if listed and model not in {m["id"] for m in listed}:
            raise ModelLoadError(f"--model: {model!r} is not among the models {self.endpoint}/models lists ({names})")
        return model

    # -- requests -------------------------------------------------------------------------------

    def _scrub(self, text: str, limit: int | None = None) -> str:
        """A text from the server with the API key replaced, then cut to ``limit`` characters (in that order: a key
        that straddles the cut would survive in part)."""
        text = text.replace(self._key, "[the API key]") if self._key else text
        return text if limit is None else text[:limit]

    def _once(self, path: str, body: Mapping | None, timeout: float) -> tuple[dict, str]:
        """One request: its JSON reply and the Server header; _Transient for what a retry may fix."""
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode("utf-8"), "application/json"
        request = urllib.request.Request(self.endpoint + path, data=data, headers=headers)
        with self._lock:
            self.stats["requests"] += 1
        try:
            with self._opener.open(request, timeout=timeout) as reply:
                raw, server = reply.read(), self._scrub(reply.headers.get("Server", "unknown"), 200)
        except urllib.error.HTTPError as exc:
            if exc.code == 429 or exc.code >= 500:
                raise _Transient(f"HTTP {exc.code}", _retry_after(exc.headers)) from None
            detail = self._scrub(exc.read(1 << 16).decode("utf-8", "replace"), 400)
            raise EndpointError(f"{self.endpoint}{path} answered HTTP {exc.code}: {detail}", exc.code) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Transient(f"{type(reason).__name__}: {self._scrub(str(reason))}") from None
        try:
            return json.loads(raw), server
        except ValueError:
            raise _Transient("a reply that is not JSON (cut short?)") from None

    def _call(self, path: str, body: Mapping | None = None, timeout: float | None = None,
              retries: int | None = None) -> tuple[dict, str]:
        """The JSON reply of a request, retried on 429, 5xx, dropped connections and timeouts with exponential
        backoff; retries spent (or the endpoint already found dead in this run) raise EndpointUnreachable."""
        retries = self.retries if retries is None else retries
        reason = ""
        for attempt in range(retries + 1):
            if self._dead:
                raise EndpointUnreachable(self._dead)
            try:
                return self._once(path, body, timeout or self.timeout_s)
            except _Transient as exc:
                reason = str(exc)
                if attempt == retries:
                    break
                with self._lock:
                    self.stats["retries"] += 1
                time.sleep(exc.retry_after if exc.retry_after is not None
                           else min(BACKOFF_S * 2 ** attempt, MAX_BACKOFF_S))
        self._dead = f"the endpoint {self.endpoint} does not answer: {reason} ({retries + 1} attempts)"
        raise EndpointUnreachable(self._dead)

    def _models(self) -> tuple[list[dict], str]:
        """The endpoint's model list and its Server header (fast: a dead endpoint fails within seconds)."""
        try:
            reply, server = self._call("/models", timeout=CONNECT_TIMEOUT_S, retries=1)
        except EndpointError:
            return [], "unknown"  # a server without a model list: --model must name the model
        listed = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(listed, list):
            return [], server
        return [{**m, "id": self._scrub(str(m["id"]))} for m in listed if isinstance(m, dict) and "id" in m], server

    def _chat(self, content: list, max_tokens: int, logprobs: bool) -> dict:
        body: dict[str, Any] = {"model": self.model_id, "messages": [{"role": "user", "content": content}],
                                "temperature": 0, "max_tokens": max_tokens}
        if logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        reply, _ = self._call("/chat/completions", body)
        if not isinstance(reply, dict) or not reply.get("choices"):
            raise EndpointError(f"{self.endpoint}/chat/completions: the reply is no chat completion: "
                                f"{self._scrub(json.dumps(reply), 300)}")
        return reply

    def _probe(self) -> tuple[bool, str]:
        """Whether the server returns top_logprobs (and why not, when it refuses them)."""
        text = [{"type": "text", "text": PROBE_TEXT}]
        try:
            return bool(first_answer_token(self._chat(text, 1, logprobs=True))), ""
        except EndpointError as exc:
            self._chat(text, 1, logprobs=False)
            return False, f" (the server refused logprobs: HTTP {exc.status})"  # no URL: the identity keeps no port

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

    def _content(self, row: Row) -> list[dict]:
        images = [{"type": "image_url", "image_url": {"url": self._image_url(im)}} for im in row.images]
        return [*images, {"type": "text", "text": user_text(row)}]

    def _text(self, row: Row, max_tokens: int) -> tuple[str, dict]:
        reply = self._chat(self._content(row), max_tokens, self.probabilities)
        text = self._scrub(str((reply["choices"][0].get("message") or {}).get("content") or ""))
        with self._lock:
            self.stats["rows"] += 1
        return text, reply

    def answer(self, row: Row) -> Answer:
        """One row answered: the text, the option it names (label order) and, with probabilities, the logits."""
        text, reply = self._text(row, self.max_tokens)
        extraction = extract(text, row.shown_options, row.primitive)
        logits = None
        if self.probabilities:
            top = first_answer_token(reply)
            if not top:
                raise EndpointError(f"{self.endpoint}/chat/completions: row {row.row_id}: the reply has no "
                                    "top_logprobs, though the server returned them when the run started")
            logits = to_label_order(row, option_logits(top, row.shown_options, row.primitive))
        return Answer(text, label_choice(row, extraction.index), extraction.rule, logits)

    def _each(self, rows: Sequence[Row], work) -> list:
        if len(rows) <= 1:
            return [work(r) for r in rows]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="laya-served")
        return list(self._pool.map(work, rows))

    def answers(self, rows: Sequence[Row]) -> list[Answer]:
        """Every row answered (up to ``concurrency`` requests in flight), in row order."""
        return self._each(rows, self.answer)

    def generate(self, rows: Sequence[Row], max_new_tokens: int = 16) -> list[str]:
        """The generated text of each row (open-answer rows), ``max_new_tokens`` at most."""
        return self._each(rows, lambda r: self._text(r, max_new_tokens)[0])

