"""Scorer for a model behind an OpenAI-compatible chat endpoint (vLLM, SGLang, TGI, ``transformers serve``, hosted
APIs): one chat request per row, its answer mapped to an option by ``scoring.extraction``, option probabilities only
from the ``top_logprobs`` a server returns for the first answer token.

- **Request**: one user turn with the row's images as PNG data URLs in row order, then the text
  ``scoring.prompt.user_text`` makes (the question the in-process scorer asks), temperature 0, ``max_tokens`` 16.
- **Faults**: up to ``concurrency`` requests are in flight, each whole request and reply within ``timeout_s`` (its
  sockets are shut when the time is up, however slowly the reply comes); a 429, a 5xx, a dropped connection or a
  timeout is retried ``RETRIES`` times with exponential backoff (a ``Retry-After`` is honoured); another error
  reply, a reply over ``MAX_REPLY_BYTES`` or a malformed one fails at once (``EndpointError``). An endpoint that
  cannot be reached when the scorer connects, or whose retries run out, raises ``EndpointUnreachable``
  (``stops_run``): nothing more can be scored; one that refuses the credentials raises ``CredentialsRefused``.
- **Capability**: connecting asks once for ``logprobs`` / ``top_logprobs``; when the reply carries them every answer
  gets option logits (``option_logits``), else the scorer is generation-only (``probabilities`` False).
- **Secrets**: the API key is read from the environment variable named by ``api_key_env``, sent as a bearer
  token to the endpoint's origin (scheme, host and port) only: a redirect elsewhere is refused
  (``RedirectRefused``), never followed with the key. Every text a server sends (error bodies, answers, model
  ids, its ``Server`` header, a redirect's target) is scrubbed of the key, then its control characters are made
  visible (``visible``: an escape sequence reaches no terminal or report as such), then it is cut to length, so
  the key is never in the identity, a message, an answer or a report. A record keeps ``MAX_ANSWER_CHARS`` of an
  answer; the extraction reads all of it.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import re
import socket
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
#: The most bytes of one reply (a chat completion with top_logprobs is a few KiB, a hosted model list tens): a
#: longer one is an error naming the endpoint and its size, and nothing of it is kept.
MAX_REPLY_BYTES = 4 << 20
#: The most characters of an answer a record keeps (an answer of ``max_tokens`` 16 is a few dozen); the
#: extraction reads the whole answer before it is cut.
MAX_ANSWER_CHARS = 4000
#: The most characters of a server's text kept in a message or the identity (an error body, a header, a field).
MAX_SHOWN_CHARS = 400
_READ_CHUNK = 1 << 16
#: Control characters (C0 but tab and newline, DEL, C1, the bidirectional overrides and isolates, the line and
#: paragraph separators): an escape sequence clears a terminal or sets its title, a bidi override reorders text.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_CONTROL_OR_BREAK = re.compile(f"[\t\n{_CONTROLS}]")


class EndpointUnreachable(RuntimeError):
    """The endpoint cannot be reached, or stopped answering (its retries ran out): the run stops (exit 3)."""

    stops_run = True


class CredentialsRefused(EndpointUnreachable):
    """The endpoint refused the request's credentials (HTTP 401 or 403): nothing can be scored (exit 3)."""


class RedirectRefused(EndpointUnreachable):
    """The endpoint redirected a request to another origin: not followed, since the request carries the API key;
    nothing can be scored (exit 3)."""


class EndpointError(RuntimeError):
    """The endpoint answered with an error retrying cannot fix (a 4xx other than 429, a reply that is no chat
    completion): the rows of that call cannot be scored (exit 3). ``status``: the HTTP status, if any; ``detail``: what
    the server said (scrubbed, visible, cut)."""

    def __init__(self, message: str, status: int | None = None, detail: str = ""):
        super().__init__(message)
        self.status, self.detail = status, detail


#: What servers say when a prompt is longer than the model's context (llama.cpp: "exceeds the available context
#: size"; vLLM, OpenAI: "maximum context length"; others: "context length", "context window", "too many tokens").
CONTEXT_REFUSAL = re.compile(r"context (size|length|window)|too many (input )?tokens|prompt is too long", re.I)


def exceeds_context(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing a prompt longer than its model's context (an HTTP 400 saying so)."""
    return isinstance(exc, EndpointError) and exc.status in (400, 413, 422) and bool(CONTEXT_REFUSAL.search(exc.detail))


class _Transient(Exception):
    """A failure worth retrying: 429, 5xx, a dropped or refused connection, a timeout, a reply cut short."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


def visible(text: str, lines: bool = False) -> str:
    """``text`` with its control characters written out as Python escapes (``\\x1b``, ``\\u202e``), so none acts
    on a terminal or a page; ``lines``: tab and newline are kept (an answer's lines).

    >>> print(visible("model\\x1b[2J\\x1b]0;title\\x07\\ttab"), visible("a\\nb", lines=True) == "a\\nb")
    model\\x1b[2J\\x1b]0;title\\x07\\ttab True
    """
    pattern = _CONTROL if lines else _CONTROL_OR_BREAK
    return pattern.sub(lambda m: ascii(m.group())[1:-1], text)


def kept_answer(text: str) -> str:
    """An answer as a record keeps it: its first ``MAX_ANSWER_CHARS`` characters, and how long it was when longer.

    >>> kept_answer("B"), kept_answer("x" * 5000)[-44:]
    ('B', 'x [... cut: the answer has 5,000 characters]')
    """
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return f"{text[:MAX_ANSWER_CHARS]} [... cut: the answer has {len(text):,} characters]"


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


class _Deadline:
    """The end of one request's time: when it comes, the sockets the request opened are shut, so a reply that
    trickles in (urllib's timeout bounds each read, not the request) ends there. ``with`` it around the request:
    the connections made meanwhile on this thread are watched (``_Watched``)."""

    _current = threading.local()

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        _Deadline._current.value = self
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        _Deadline._current.value = None

    @classmethod
    def watch(cls, sock: socket.socket) -> None:
        """Shut ``sock`` when the current request's time is up (at once, if it already is)."""
        deadline = getattr(cls._current, "value", None)
        if deadline is not None:
            with deadline._lock:
                deadline._sockets.append(sock)
                expired = deadline.expired
            if expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown (an SSL socket's own drops its state under a reading thread)
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Watched:
    """A connection whose socket the current request's ``_Deadline`` shuts when its time is up."""

    def connect(self):
        super().connect()
        _Deadline.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_WatchedHTTP, req, **kwargs)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_WatchedHTTPS, req, **kwargs)


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


def _finite(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an int past the float range
        return False


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
        self.api_key_env = api_key_env
        self.concurrency, self.timeout_s, self.max_tokens, self.retries = concurrency, timeout_s, max_tokens, retries
        self.model_id: str | None = None
        self.probabilities = False
        self.identity: dict = {}
        self.stats = {"requests": 0, "retries": 0, "rows": 0}
        # never an environment proxy; redirects only within the endpoint's origin; sockets shut at each deadline
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   _SameOriginRedirects(origin(parts), self._scrub),
                                                   _WatchedHTTPHandler(), _WatchedHTTPSHandler())
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
            "server": {"software": server, **{k: scorer._field(entry[k]) for k in SERVER_FIELDS if k in entry}},
            "prompt_format": PROMPT_FORMAT, "extraction_rules": EXTRACTION_RULES, "max_tokens": scorer.max_tokens,
            "probabilities": PROBABILITIES if scorer.probabilities else f"none: {NO_PROBABILITIES}{refused}",
        }
        return scorer

    def _choose(self, listed: list[dict], model: str | None) -> str:
        """The model to gate: ``model``, which the endpoint must list when it lists any, or the only one listed."""
        names = self._scrub(", ".join(m["id"] for m in listed)) or "none"
        if model is None:
            if len(listed) != 1:
                raise ModelLoadError(f"--model: {self.endpoint}/models lists {len(listed)} models ({names}); "
                                     "name the one to gate with --model")
            return listed[0]["id"]
        if listed and model not in {m["id"] for m in listed}:
            raise ModelLoadError(f"--model: {model!r} is not among the models {self.endpoint}/models lists ({names})")
        return model

    # -- requests -------------------------------------------------------------------------------

    def _scrub(self, text: str, limit: int | None = MAX_SHOWN_CHARS, lines: bool = False) -> str:
        """A text from the server with the API key replaced, then its control characters made visible (``visible``;
        ``lines``: tab and newline kept), then cut to ``limit`` characters (in that order: a key that straddles
        the cut would survive in part, an escape cut in two would not be seen whole)."""
        text = text.replace(self._key, "[the API key]") if self._key else text
        text = visible(text, lines)
        return text if limit is None else text[:limit]

    def _field(self, value: Any) -> Any:
        """A field of a model entry as the identity keeps it: a string scrubbed, a number or bool as it is, anything
        else (a list, a table, an int past 64 bits) as its scrubbed JSON."""
        if isinstance(value, str):
            return self._scrub(value)
        if value is None or isinstance(value, bool) or (isinstance(value, (int, float)) and abs(value) < 2 ** 63):
            return value
        return self._scrub(json.dumps(value))

    def _read(self, reply, path: str) -> bytes:
        """The body of ``reply``, at most MAX_REPLY_BYTES (else EndpointError naming the endpoint and the size)."""
        declared = reply.headers.get("Content-Length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
            raise self._too_long(path, f"{int(declared):,} bytes (its Content-Length)")
        chunks, size = [], 0
        while chunk := reply.read1(_READ_CHUNK):
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise self._too_long(path, f"over {size:,} bytes when it was cut off")
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_long(self, path: str, size: str) -> "EndpointError":
        return EndpointError(f"{self.endpoint}{path}: the reply is {size}, over the limit of {MAX_REPLY_BYTES:,} "
                             "bytes of one reply; nothing of it is kept")

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
        with _Deadline(timeout) as deadline:
            try:
                with self._opener.open(request, timeout=timeout) as reply:
                    raw, server = self._read(reply, path), self._scrub(reply.headers.get("Server", "unknown"), 200)
            except urllib.error.HTTPError as exc:
                if exc.code == 429 or exc.code >= 500:
                    raise _Transient(f"HTTP {exc.code}", _retry_after(exc.headers)) from None
                try:
                    detail = self._scrub(exc.read(1 << 16).decode("utf-8", "replace"))
                except (http.client.HTTPException, OSError):
                    detail = "(its body was cut short)"
                raise EndpointError(f"{self.endpoint}{path} answered HTTP {exc.code}: {detail}", exc.code,
                                    detail) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if deadline.expired:
                    raise _Transient(f"TimeoutError: no whole reply within {timeout:g} s") from None
                reason = getattr(exc, "reason", exc)
                raise _Transient(f"{type(reason).__name__}: {self._scrub(str(reason), 300)}") from None
        try:
            return json.loads(raw), server
        except ValueError:  # a body cut at the deadline reads as an early end: no JSON object
            cut = f"TimeoutError: no whole reply within {timeout:g} s" if deadline.expired else None
            raise _Transient(cut or "a reply that is not JSON (cut short?)") from None

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
        except EndpointError as exc:
            if exc.status in (401, 403):
                raise CredentialsRefused(f"{self.endpoint}/models refused the credentials (HTTP {exc.status}): "
                                         f"check the key in ${self.api_key_env} (it answered: {exc.detail})") from None
            return [], "unknown"  # a server without a model list: --model must name the model
        listed = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(listed, list):
            return [], server
        return [{**m, "id": self._scrub(str(m["id"]), None)} for m in listed if isinstance(m, dict) and "id" in m], \
            server

    def _chat(self, content: list, max_tokens: int, logprobs: bool) -> dict:
        body: dict[str, Any] = {"model": self.model_id, "messages": [{"role": "user", "content": content}],
                                "temperature": 0, "max_tokens": max_tokens}
        if logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        reply, _ = self._call("/chat/completions", body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
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
        except ValueError as exc:  # logprobs of another shape: no probabilities to read
            return False, f" (the server's logprobs are malformed: {self._scrub(str(exc), 200)})"

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
        """The whole answer (scrubbed, control characters visible, not cut) and the reply."""
        reply = self._chat(self._content(row), max_tokens, self.probabilities)
        message = reply["choices"][0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        text = self._scrub(str(content or ""), None, lines=True)
        with self._lock:
            self.stats["rows"] += 1
        return text, reply

    def answer(self, row: Row) -> Answer:
        """One row answered: the text (cut to MAX_ANSWER_CHARS once the extraction has read it whole), the option it
        names (label order) and, with probabilities, the logits."""
        text, reply = self._text(row, self.max_tokens)
        extraction = extract(text, row.shown_options, row.primitive)
        logits = None
        if self.probabilities:
            where = f"{self.endpoint}/chat/completions: row {row.row_id}"
            try:
                top = first_answer_token(reply)
            except ValueError as exc:
                raise EndpointError(f"{where}: the reply is malformed: {self._scrub(str(exc))}") from None
            if not top:
                raise EndpointError(f"{where}: the reply has no top_logprobs, though the server returned them when "
                                    "the run started")
            logits = to_label_order(row, option_logits(top, row.shown_options, row.primitive))
        return Answer(kept_answer(text), label_choice(row, extraction.index), extraction.rule, logits)

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
        return self._each(rows, lambda r: kept_answer(self._text(r, max_new_tokens)[0]))

