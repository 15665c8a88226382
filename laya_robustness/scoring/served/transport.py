"""The HTTP transport of a served model: JSON requests to one endpoint, within bounds and retried, every text the
server sends made harmless. It knows requests and replies, not what they ask.

- **Faults**: each whole request and reply within its timeout (its sockets are shut when the time is up, however
  slowly the reply comes); a 429, a 5xx, a dropped connection or a timeout is retried ``RETRIES`` times with
  exponential backoff (a ``Retry-After`` is honoured); another error reply or a reply over ``MAX_REPLY_BYTES`` fails
  at once (``EndpointError``). An endpoint whose retries run out raises ``EndpointUnreachable`` (``stops_run``):
  nothing more can be scored, and every later request raises it at once.
- **Secrets**: the API key is read from the environment variable named by ``api_key_env``, sent as a bearer
  token to the endpoint's origin (scheme, host and port) only: a redirect elsewhere is refused
  (``RedirectRefused``), never followed with the key. Every text a server sends (error bodies, answers, model
  ids, its ``Server`` header, a redirect's target) is scrubbed of the key, then its control characters are made
  visible (``visible``: an escape sequence reaches no terminal or report as such), then it is cut to length
  (``Transport.scrub``), so the key is never in the identity, a message, an answer or a report.
- **The server's root**: the endpoint is the ``/v1`` of a server; a request ``at_root`` goes beside it (vLLM's
  ``/tokenize``, llama.cpp's ``/props``), to the same origin with the same key.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Mapping

RETRIES = 4
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 30.0
#: The most bytes of one reply (a chat completion with top_logprobs is a few KiB, a hosted model list tens): a
#: longer one is an error naming the endpoint and its size, and nothing of it is kept.
MAX_REPLY_BYTES = 4 << 20
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
    the server said (scrubbed, visible, cut); ``numbers``: the integer fields of its JSON error body (or of the
    body's ``error`` object), as llama.cpp's ``n_prompt_tokens`` of a prompt longer than its context."""

    def __init__(self, message: str, status: int | None = None, detail: str = "",
                 numbers: Mapping[str, int] | None = None):
        super().__init__(message)
        self.status, self.detail, self.numbers = status, detail, dict(numbers or {})


def error_numbers(body: str) -> dict[str, int]:
    """The integer fields of a JSON error body, or of its ``error`` object ({} when it is no JSON object).

    >>> error_numbers('{"error": {"code": 400, "message": "long", "n_prompt_tokens": 790, "n_ctx": 512}}')
    {'code': 400, 'n_prompt_tokens': 790, 'n_ctx': 512}
    """
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    fields = parsed.get("error") if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) else parsed
    if not isinstance(fields, dict):
        return {}
    return {k: v for k, v in fields.items() if isinstance(v, int) and not isinstance(v, bool)}


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
    ``RedirectRefused`` naming both URLs (``scrub``: the transport's scrubbing of server text)."""

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


def _retry_after(headers) -> float | None:
    try:
        return min(max(float(headers.get("Retry-After")), 0.0), MAX_RETRY_AFTER_S)
    except (TypeError, ValueError):
        return None



class Transport:
    """JSON requests to one endpoint (see the module doc): :meth:`call` a path, get its reply and Server header.
    ``stats``: the counters :meth:`count` adds to (``requests`` and ``retries`` here; its own dict when not given)."""

    def __init__(self, endpoint: str, *, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0,
                 retries: int = RETRIES, stats: dict | None = None):
        parts = endpoint_parts(endpoint)
        self.endpoint = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        #: The server's root: the endpoint without its final ``/v1`` (the endpoint itself where it has none).
        self.root = self.endpoint.removesuffix("/v1")
        self.host = parts.hostname
        self._key = os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        self.timeout_s, self.retries = timeout_s, retries
        self.stats = {"requests": 0, "retries": 0} if stats is None else stats
        # never an environment proxy; redirects only within the endpoint's origin; sockets shut at each deadline
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   _SameOriginRedirects(origin(parts), self.scrub),
                                                   _WatchedHTTPHandler(), _WatchedHTTPSHandler())
        self._lock = threading.Lock()
        self._dead: str | None = None

    def count(self, name: str) -> None:
        """One more of the counter ``name`` in ``stats`` (requests run on several threads)."""
        with self._lock:
            self.stats[name] = self.stats.get(name, 0) + 1

    def scrub(self, text: str, limit: int | None = MAX_SHOWN_CHARS, lines: bool = False) -> str:
        """A text from the server with the API key replaced, then its control characters made visible (``visible``;
        ``lines``: tab and newline kept), then cut to ``limit`` characters (in that order: a key that straddles
        the cut would survive in part, an escape cut in two would not be seen whole)."""
        text = text.replace(self._key, "[the API key]") if self._key else text
        text = visible(text, lines)
        return text if limit is None else text[:limit]

    def _read(self, reply, url: str) -> bytes:
        """The body of ``reply``, at most MAX_REPLY_BYTES (else EndpointError naming the URL and the size)."""
        declared = reply.headers.get("Content-Length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
            raise self._too_long(url, f"{int(declared):,} bytes (its Content-Length)")
        chunks, size = [], 0
        while chunk := reply.read1(_READ_CHUNK):
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise self._too_long(url, f"over {size:,} bytes when it was cut off")
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_long(self, url: str, size: str) -> "EndpointError":
        return EndpointError(f"{url}: the reply is {size}, over the limit of {MAX_REPLY_BYTES:,} "
                             "bytes of one reply; nothing of it is kept")

    def _once(self, url: str, body: Mapping | None, timeout: float) -> tuple[dict, str]:
        """One request to ``url``: its JSON reply and the Server header; _Transient for what a retry may fix."""
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode("utf-8"), "application/json"
        request = urllib.request.Request(url, data=data, headers=headers)
        self.count("requests")
        with _Deadline(timeout) as deadline:
            try:
                with self._opener.open(request, timeout=timeout) as reply:
                    raw, server = self._read(reply, url), self.scrub(reply.headers.get("Server", "unknown"), 200)
            except urllib.error.HTTPError as exc:
                if exc.code == 429 or exc.code >= 500:
                    raise _Transient(f"HTTP {exc.code}", _retry_after(exc.headers)) from None
                try:
                    said = exc.read(1 << 16).decode("utf-8", "replace")
                except (http.client.HTTPException, OSError):
                    said = "(its body was cut short)"
                detail = self.scrub(said)
                raise EndpointError(f"{url} answered HTTP {exc.code}: {detail}", exc.code, detail,
                                    error_numbers(said)) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if deadline.expired:
                    raise _Transient(f"TimeoutError: no whole reply within {timeout:g} s") from None
                reason = getattr(exc, "reason", exc)
                raise _Transient(f"{type(reason).__name__}: {self.scrub(str(reason), 300)}") from None
        try:
            return json.loads(raw), server
        except ValueError:  # a body cut at the deadline reads as an early end: no JSON object
            cut = f"TimeoutError: no whole reply within {timeout:g} s" if deadline.expired else None
            raise _Transient(cut or "a reply that is not JSON (cut short?)") from None

    def lookup(self, path: str, body: Mapping | None = None) -> dict | None:
        """The JSON object one request to ``path`` beside the endpoint (at the server's root) answers, or None where it
        answers none (an error, a timeout, no JSON object): a question about what the server offers, asked once, never
        retried, and never taken as the endpoint's death."""
        if self._dead:
            raise EndpointUnreachable(self._dead)
        try:
            reply = self._once(self.root + path, body, self.timeout_s)[0]
        except (_Transient, EndpointError):
            return None
        return reply if isinstance(reply, dict) else None

    def call(self, path: str, body: Mapping | None = None, timeout: float | None = None,
             retries: int | None = None, at_root: bool = False) -> tuple[dict, str]:
        """The JSON reply of a request to ``path`` under the endpoint (``at_root``: under the server's root) and its
        Server header, retried on 429, 5xx, dropped connections and timeouts with exponential backoff; retries spent
        (or the endpoint already found dead in this run) raise EndpointUnreachable."""
        retries = self.retries if retries is None else retries
        url = (self.root if at_root else self.endpoint) + path
        reason = ""
        for attempt in range(retries + 1):
            if self._dead:
                raise EndpointUnreachable(self._dead)
            try:
                return self._once(url, body, timeout or self.timeout_s)
            except _Transient as exc:
                reason = str(exc)
                if attempt == retries:
                    break
                self.count("retries")
                time.sleep(exc.retry_after if exc.retry_after is not None
                           else min(BACKOFF_S * 2 ** attempt, MAX_BACKOFF_S))
        self._dead = f"the endpoint {self.endpoint} does not answer: {reason} ({retries + 1} attempts)"
        raise EndpointUnreachable(self._dead)
