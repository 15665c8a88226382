"""A served model's replies within bounds and its text made harmless, against real misbehaving HTTP servers on
127.0.0.1 written here: a reply that trickles in byte by byte, a reply of 50 MB, an answer of 100,000 characters,
escape sequences and markup in a model id, a header, an error body and an answer, a 401 on the model list, and
``top_logprobs`` that are a string. Each fault is met by the scorer directly, and the worst by the gate as a user
runs it (``pytest robustness_tests --scorer openai --endpoint ...``), its exit status and report folder checked."""

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from PIL import Image

from laya_robustness.rows import Row
from laya_robustness.scoring.served import (
    MAX_ANSWER_CHARS,
    MAX_REPLY_BYTES,
    CredentialsRefused,
    EndpointError,
    EndpointUnreachable,
    ServedScorer,
)

from helpers.served_parts import LocalServer

ROOT = Path(__file__).resolve().parents[2]
#: Clears the terminal and sets its title: what a hostile server sends to reach whoever reads the output.
ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
SHOWN_ESCAPES = "\\x1b[2J\\x1b]0;pwned\\x07"
#: A model id that closes a code span and the page title early, then opens a script.
HOSTILE_ID = ESCAPES + "m`</title><script>alert(1)</script>`x"
KEY_ENV = "LAYA_BOUNDS_TEST_KEY"


def completion(text: str, logprobs=None) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "c", "object": "chat.completion", "choices": [choice]}


def answers_a(request: dict) -> tuple[int, bytes]:
    return 200, json.dumps(completion("A")).encode()


class Misbehaving(LocalServer):
    """An OpenAI-compatible server on 127.0.0.1 that misbehaves on purpose. ``models``: the status and body of
    ``/v1/models``; ``chat(request)``: the status and body of a chat completion; ``trickle_s``: the whole reply
    (status line, headers, body) is written a byte at a time, this far apart (``trickle`` says which paths);
    ``chunked``: a reply is sent chunked with no Content-Length; ``server``: the Server header."""

    def __init__(self, chat=answers_a, models=(200, {"object": "list", "data": [{"id": "tiny"}]}),
                 trickle_s: float = 0.0, trickle=("/v1/chat/completions",), chunked: bool = False,
                 server: str = "misbehaving/1"):
        self.chat, self.models, self.trickle_s, self.trickle = chat, models, trickle_s, trickle
        self.chunked, self.server_header = chunked, server
        self.requests: list[dict] = []
        super().__init__(self._handler())

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                status, body = server.models
                self._send(status, body if isinstance(body, bytes) else json.dumps(body).encode())

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(request)
                self._send(*server.chat(request))

            def _send(self, status: int, data: bytes):
                length = "" if server.chunked else f"Content-Length: {len(data)}\r\n"
                head = (f"HTTP/1.1 {status} Whatever\r\nServer: {server.server_header}\r\n"
                        f"Content-Type: application/json\r\n{length}"
                        f"{'Transfer-Encoding: chunked' + chr(13) + chr(10) if server.chunked else ''}\r\n")
                raw = head.encode("utf-8", "surrogateescape")
                try:
                    if server.trickle_s and self.path in server.trickle:
                        for i in range(len(raw + data)):
                            self.wfile.write((raw + data)[i:i + 1])
                            self.wfile.flush()
                            time.sleep(server.trickle_s)
                    elif server.chunked:
                        self.wfile.write(raw)
                        for i in range(0, len(data), 1 << 20):
                            piece = data[i:i + (1 << 20)]
                            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.wfile.write(raw + data)
                    self.wfile.flush()
                except OSError:  # the client gave up on it (cut at its deadline or its size)
                    self.close_connection = True

        return Handler


def a_row(row_id: str = "colours/1") -> Row:
    return Row(row_id, "colours", row_id, row_id, (Image.new("RGB", (8, 8), "red"),), "What colour is it?",
               ("red", "blue"), 1)


def run_gate(endpoint: str, folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The gate as a user runs it against ``endpoint``: the result and its seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           KEY_ENV: "sk-bounds-test"}
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--scorer", "openai", "--endpoint", endpoint, "--api-key-env", KEY_ENV, "--rows-per-set", "1",
               "--families", "option_order", "--report-dir", str(folder), *args]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return result, time.monotonic() - started


def folder_files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


# -- the total time of a request ----------------------------------------------------------------------------


def test_a_reply_that_trickles_in_is_cut_at_the_request_timeout():
    """A byte every 0.2 s (each read well within the timeout, the reply 40 s in all): cut at 1 s, retried once,
    then the endpoint is dead, named."""
    with Misbehaving(trickle_s=0.2) as server:
        started = time.monotonic()
        with pytest.raises(EndpointUnreachable) as raised:
            ServedScorer.connect(server.url, timeout_s=1, retries=1)
        took = time.monotonic() - started
    assert f"the endpoint {server.url} does not answer: TimeoutError: no whole reply within 1 s (2 attempts)" == \
        str(raised.value)
    assert took < 5, took


def test_a_model_list_that_trickles_in_is_cut_too():
    """Headers too are under the deadline: the model list trickled from its status line on."""
    with Misbehaving(trickle_s=0.2, trickle=("/v1/models",)) as server:
        started = time.monotonic()
        with pytest.raises(EndpointUnreachable, match="no whole reply within 4 s"):
            ServedScorer.connect(server.url, timeout_s=1, retries=1)
    assert time.monotonic() - started < 12


def test_a_gate_against_a_trickling_server_ends_with_exit_3_naming_it(tmp_path):
    with Misbehaving(trickle_s=0.5) as server:
        result, took = run_gate(server.url, tmp_path / "reports", "--request-timeout", "1")
    out = result.stdout + result.stderr
    assert result.returncode == 3, out[-3000:]
    assert f"the endpoint {server.url} does not answer: TimeoutError: no whole reply within 1 s (5 attempts)" in out
    assert took < 30, took
    assert not (tmp_path / "reports").exists()  # stopped before anything was collected


# -- the size of a reply and of an answer -------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_reply_of_50_mb_is_refused_and_not_kept(chunked):
    big = json.dumps(completion("A" * 50_000_000)).encode()
    with Misbehaving(chat=lambda request: (200, big), chunked=chunked) as server:
        started = time.monotonic()
        with pytest.raises(EndpointError) as raised:
            ServedScorer.connect(server.url)
        took = time.monotonic() - started
    size = "over 4,2" if chunked else f"{len(big):,} bytes (its Content-Length)"  # cut at the first chunk past it
    assert str(raised.value).startswith(f"{server.url}/chat/completions: the reply is {size}")
    assert str(raised.value).endswith(f"over the limit of {MAX_REPLY_BYTES:,} bytes of one reply; nothing of it is "
                                      "kept")
    assert took < 10, took


def test_a_gate_whose_rows_get_50_mb_replies_ends_with_exit_3_and_keeps_none_of_them(tmp_path):
    """The capability probe (one token) is answered as usual, every row with 50 MB: each family's rows fail naming
    the endpoint and the size; the report folder holds nothing of those replies."""
    big = json.dumps(completion("A" * 50_000_000)).encode()

    def chat(request):
        return (200, big) if request["max_tokens"] > 1 else answers_a(request)

    with Misbehaving(chat=chat) as server:
        result, took = run_gate(server.url, tmp_path / "reports", "-k", "not (invariance or benchmark)")
    out = result.stdout + result.stderr
    assert result.returncode == 3, out[-3000:]
    assert f"{server.url}/chat/completions: the reply is {len(big):,} bytes (its Content-Length), over the limit" in out
    assert sum(folder_files(tmp_path / "reports").values()) < 1_000_000, folder_files(tmp_path / "reports")
    assert took < 60, took


def test_a_long_answer_is_cut_in_the_record_after_the_extraction_read_it_whole():
    """100,000 characters whose normalised form is the letter B: the option is B, the record keeps 4,000."""
    with Misbehaving(chat=lambda request: (200, json.dumps(completion("B" + " " * 100_000 + ".")).encode())) \
            as server:
        scorer = ServedScorer.connect(server.url)
        answer, = scorer.answers([a_row()])
        text, = scorer.generate([a_row()])
    assert answer.choice == 1 and answer.extraction == "letter"
    assert answer.text.startswith("B   ") and answer.text.endswith("[... cut: the answer has 100,002 characters]")
    assert len(answer.text) < MAX_ANSWER_CHARS + 50 and text == answer.text


# -- text from a server is made harmless ---------------------------------------------------------------------


def test_control_characters_from_a_server_are_made_visible_everywhere_it_reaches():
    """A model id, the Server header, an answer and a 4xx body with a clear-screen and a title sequence (and a
    bidi override): each reaches the scorer's id, identity, answer and error written out, newlines of an answer
    kept."""
    def chat(request):
        if request["max_tokens"] == 1:
            return answers_a(request)
        if request["messages"][0]["content"][-1]["text"].startswith("Refuse"):
            return 400, f'{{"error": "bad{ESCAPES}\u202eetc"}}'.encode()  # raw, as a careless server writes it
        return 200, json.dumps(completion(f"B{ESCAPES}\nsecond line")).encode()

    models = (200, {"data": [{"id": HOSTILE_ID, "owned_by": f"me{ESCAPES}", "parent": {"x": ESCAPES}}]})
    with Misbehaving(chat=chat, models=models, server=f"evil{ESCAPES}") as server:
        scorer = ServedScorer.connect(server.url)
        answer, = scorer.answers([a_row()])
        with pytest.raises(EndpointError) as raised:
            scorer.answers([Row("r/2", "r", "r/2", "r/2", (), "Refuse this", ("a", "b"), 0)])
    assert scorer.model_id == HOSTILE_ID.replace(ESCAPES, SHOWN_ESCAPES)
    identity = json.dumps(scorer.identity, ensure_ascii=False)
    assert "\x1b" not in identity and "\x07" not in identity
    assert scorer.identity["server"] == {"software": f"evil{SHOWN_ESCAPES}", "owned_by": f"me{SHOWN_ESCAPES}",
                                         "parent": '{"x": "\\u001b[2J\\u001b]0;pwned\\u0007"}'}
    assert answer.text == f"B{SHOWN_ESCAPES}\nsecond line"
    assert str(raised.value).endswith(f'HTTP 400: {{"error": "bad{SHOWN_ESCAPES}\\u202eetc"}}')


def test_a_gate_against_a_server_with_a_hostile_model_id_prints_and_writes_it_harmless(tmp_path):
    """The escape sequences reach neither the terminal nor a report; report.html's title and summary.md's heading
    hold the id as text (a CommonMark parser reads the heading as text alone: the whole id, no code span, no HTML)."""
    markdown_it = pytest.importorskip("markdown_it")
    models = (200, {"data": [{"id": HOSTILE_ID}]})
    with Misbehaving(models=models, server=f"evil{ESCAPES}",
                     chat=lambda r: (200, json.dumps(completion(f"A{ESCAPES}")).encode())) as server:
        result, _ = run_gate(server.url, tmp_path / "reports", "-k", "not (invariance or benchmark)")
    out = result.stdout + result.stderr
    assert result.returncode in (0, 1), out[-3000:]
    assert "\x1b" not in out and "\x07" not in out and SHOWN_ESCAPES in out
    reports = tmp_path / "reports"
    for path in reports.glob("*"):
        if path.suffix in (".json", ".md", ".html"):
            assert "\x1b" not in path.read_text() and "\x07" not in path.read_text(), path
    page = (reports / "report.html").read_text()
    shown = HOSTILE_ID.replace(ESCAPES, SHOWN_ESCAPES)
    assert "<title>Robustness report: " + shown.replace("<", "&lt;").replace(">", "&gt;") + "</title>" in page
    assert "<script>" not in page
    head, = [line for line in (reports / "summary.md").read_text().splitlines() if line.startswith("### ")]
    tokens = markdown_it.MarkdownIt("commonmark").parseInline(head)[0].children
    assert [t.type for t in tokens] == ["text"] and f"Robustness gate: {shown} (device cpu" in tokens[0].content


# -- small faults ---------------------------------------------------------------------------------------------


def test_a_401_on_the_model_list_says_the_credentials_were_refused(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with Misbehaving(models=(401, {"error": "invalid api key"})) as server:
        with pytest.raises(CredentialsRefused) as raised:
            ServedScorer.connect(server.url, api_key_env=KEY_ENV)
    assert str(raised.value) == (f"{server.url}/models refused the credentials (HTTP 401): check the key in "
                                 f'${KEY_ENV} (it answered: {{"error": "invalid api key"}})')


def test_a_gate_whose_credentials_are_refused_ends_with_exit_3_naming_the_endpoint(tmp_path):
    with Misbehaving(models=(401, {"error": "invalid api key"})) as server:
        result, took = run_gate(server.url, tmp_path / "reports")
    out = result.stdout + result.stderr
    assert result.returncode == 3, out[-3000:]
    assert f"{server.url}/models refused the credentials (HTTP 401)" in out and "lists 0 models" not in out
    assert took < 30 and not (tmp_path / "reports").exists()


def test_top_logprobs_that_are_a_string_are_no_probabilities():
    """At connecting, a string for top_logprobs makes the scorer generation-only, saying why; a row whose reply
    has one (after the probe had real ones) is malformed, an error naming the row."""
    good = [{"token": "A", "logprob": -0.1, "top_logprobs": [{"token": "A", "logprob": -0.1}]}]
    bad = [{"token": "A", "logprob": -0.1, "top_logprobs": "A B C"}]
    with Misbehaving(chat=lambda r: (200, json.dumps(completion("A", bad)).encode())) as server:
        scorer = ServedScorer.connect(server.url)
    assert not scorer.probabilities
    assert scorer.identity["probabilities"].endswith("(the server's logprobs are malformed: top_logprobs is not a "
                                                     'list of {token, logprob} objects with a finite logprob: "A B C")')
    with Misbehaving(chat=lambda r: (200, json.dumps(completion("A", good if r["max_tokens"] == 1 else bad)).encode())
                     ) as server:
        scorer = ServedScorer.connect(server.url)
        assert scorer.probabilities
        with pytest.raises(EndpointError, match=r"/chat/completions: row colours/1: the reply is malformed: "
                                                r"top_logprobs is not a list of \{token, logprob\} objects"):
            scorer.answers([a_row()])


@pytest.mark.parametrize("top", [[{"token": "A", "logprob": float("nan")}], [{"token": "A"}], ["A"],
                                 [{"token": 1, "logprob": -1.0}], [{"token": "A", "logprob": 10 ** 400}]])
def test_top_logprobs_of_another_shape_are_malformed(top):
    from laya_robustness.scoring.served import first_answer_token

    with pytest.raises(ValueError, match="top_logprobs is not a list"):
        first_answer_token(completion("A", [{"token": "A", "logprob": -0.1, "top_logprobs": top}]))
