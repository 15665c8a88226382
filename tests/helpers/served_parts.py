"""The real parts the served-model tests run against: ``transformers serve`` and llama.cpp's ``llama-server`` on
127.0.0.1, and a forwarding proxy in front of them that makes the faults a real server does not make on demand.

``ServedModel`` starts ``transformers serve laya_fixtures/tiny-smolvlm`` on a free port (offline), waits until
``/health`` answers, and can be killed and restarted on the same port. ``LlamaServer`` starts ``llama-server`` (built by
``scripts/build_llama_server.sh``) with the checkpoint's GGUF files (``laya_fixtures/tiny-smolvlm-gguf``) the same
way; it returns ``top_logprobs``. ``VllmServer`` starts vLLM's CPU build (``laya-vllm-server``, made by
``scripts/build_vllm_venv.sh``) of a checkpoint directory; it scores prompts (``prompt_logprobs``). ``FaultProxy``
forwards every request to it and, on the first attempt of a request its plan picks (by a hash of the request body, so the plan is the same
on every run), answers 429 or a 5xx, drops the connection, or replies only after the client's timeout; the retry
is forwarded as it is; the upstream's ``Server`` header is passed on, as a transparent proxy does. With
``logprobs`` it adds to each reply that asks for them the ``top_logprobs`` of the first tokens of the greedy answer,
computed by the same checkpoint in this process on the same prompt (the chat template and the processor the server
applies): ``transformers serve`` ignores ``logprobs``, so this is how the probability path meets a real server's
answers. With ``answer`` it answers chosen requests itself, as a stricter server would (a 400 for ``logprobs``, a
401 that echoes the request's credentials). Nothing else is made up: the answer text is always the server's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from helpers.paths import ROOT

MODEL = "laya_fixtures/tiny-smolvlm"
GGUF = ROOT / "laya_fixtures" / "tiny-smolvlm-gguf"
START_TIMEOUT_S = 180
FAULTS = ("429", "500", "503", "drop", "slow")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as reply:
        return reply.read()


def wait_for_health(process: subprocess.Popen, base: str, log: Path, name: str = "transformers serve") -> None:
    """Until the server at ``base`` answers ``/health`` with ok (RuntimeError when it exits or takes too long)."""
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if json.loads(_get(base + "/health")).get("status") == "ok":
                return
        except (OSError, ValueError):
            time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer /health within {START_TIMEOUT_S} s")


def wait_for_models(process: subprocess.Popen, base: str, log: Path, name: str, timeout: float) -> None:
    """Until the server at ``base`` lists a model at ``/v1/models`` (RuntimeError when it exits or takes longer than
    ``timeout``): vLLM's ``/health`` answers before its engine is up."""
    deadline = time.time() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if json.loads(_get(base + "/v1/models")).get("data"):
                return
        except (OSError, ValueError):
            pass
        if time.time() > deadline:
            raise RuntimeError(f"{name} did not list its model within {timeout:.0f} s: {log.read_text()[-3000:]}")
        time.sleep(0.5)


def stop_group(process: subprocess.Popen | None, timeout: float = 20) -> None:
    """SIGTERM to the process group of ``process`` (started with ``start_new_session``), SIGKILL after ``timeout``."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def llama_server_binary() -> Path | None:
    """``llama-server`` beside this interpreter (where ``scripts/build_llama_server.sh`` installs it), else on PATH."""
    beside = Path(sys.executable).with_name("llama-server")
    if beside.is_file():
        return beside
    found = shutil.which("llama-server")
    return Path(found) if found else None


class ServedModel:
    """``transformers serve`` of the embedded checkpoint on 127.0.0.1 (see the module doc)."""

    def __init__(self, log_dir: Path, port: int | None = None):
        self.port = port or free_port()
        self.log_dir = Path(log_dir)
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "ServedModel":
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        command = [str(Path(sys.executable).with_name("transformers")), "serve", MODEL, "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning"]
        self.starts += 1
        log = (self.log_dir / f"server.{self.starts}.log").open("wb")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        try:
            wait_for_health(self.process, self.url.removesuffix("/v1"), self.log_dir / f"server.{self.starts}.log")
        except RuntimeError:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL, as a crashed server dies (no shutdown, connections cut)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        stop_group(self.process)


class LlamaServer:
    """llama.cpp's ``llama-server`` of the checkpoint's GGUF files on a free port of 127.0.0.1, as docs/served.md starts
    it: model id ``tiny-smolvlm``, greedy (temperature 0, seed 0), ``threads`` CPU threads, ``parallel`` slots of
    ``SLOT_CONTEXT`` positions (the model's context raised from 512: llama.cpp writes an image in 38 positions,
    transformers in 19), stopped by its process group. ``command`` is what it was started with."""

    SLOT_CONTEXT = 1024

    def __init__(self, log_dir: Path, binary: Path, gguf: Path = GGUF, threads: int = 1, parallel: int = 4):
        self.port, self.log = free_port(), Path(log_dir) / "llama-server.log"
        self.command = [str(binary), "-m", str(gguf / "model.gguf"), "--mmproj", str(gguf / "mmproj.gguf"),
                        "--alias", "tiny-smolvlm", "--host", "127.0.0.1", "--port", str(self.port), "--temp", "0",
                        "--seed", "0", "--threads", str(threads), "--threads-batch", str(threads),
                        "--parallel", str(parallel), "--ctx-size", str(self.SLOT_CONTEXT * parallel),
                        "--override-kv", f"llama.context_length=int:{self.SLOT_CONTEXT}", "--no-webui"]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "LlamaServer":
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        try:
            wait_for_health(self.process, self.url.removesuffix("/v1"), self.log, "llama-server")
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_group(self.process)


#: What vLLM's CPU build is started with: 1 GiB of KV cache (it would otherwise reserve most of the machine's
#: memory), offline, no usage reports.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


class VllmServer:
    """vLLM's OpenAI-compatible server (``laya-vllm-server``: vllm-cpu in a venv of its own, made by
    ``scripts/build_vllm_venv.sh``) of ``model`` on a free port of 127.0.0.1, as docs/served.md starts it: fp32,
    the model's own context, 1 GiB of KV cache (``VLLM_CPU_KVCACHE_SPACE``: vLLM's CPU build would otherwise reserve
    most of the machine's memory), seed 0; ``flags``: any other server flag (``--no-enable-prefix-caching``). Ready
    when ``/v1/models`` lists the model (its ``/health`` says nothing before the engine is up); stopped by its
    process group."""

    START_TIMEOUT_S = 420  # about 90 s on 2 idle cores, more beside other work

    def __init__(self, log_dir: Path, binary: Path, model: Path | str = ROOT / MODEL, flags: tuple[str, ...] = ()):
        self.port, self.log = free_port(), Path(log_dir) / "vllm.log"
        self.model = str(model)
        self.command = [str(binary), "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
                        "--dtype", "float32", "--seed", "0", *flags]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "VllmServer":
        env = {**os.environ, **VLLM_ENV}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        try:
            wait_for_models(self.process, self.url.removesuffix("/v1"), self.log, "vLLM", self.START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_group(self.process, timeout=30)


def running(make, binary: Path | None, missing: str):
    """A server ``make(binary)`` started, for a fixture to yield from, and stopped after; without the ``binary`` the
    test skips, saying ``missing`` (how to build it)."""
    import pytest

    if binary is None:
        pytest.skip(missing)
    server = make(binary).start()
    try:
        yield server
    finally:
        server.stop()


def vllm_server_binary() -> Path | None:
    """``laya-vllm-server`` beside this interpreter (``scripts/build_vllm_venv.sh`` puts it there), or None."""
    path = Path(sys.prefix) / "bin" / "laya-vllm-server"
    return path if path.is_file() else None


class AnswerLogprobs:
    """The top log-probabilities of each token of the greedy answer (up to ``steps`` tokens), computed by the
    checkpoint the server serves on the prompt the server builds (``processor.apply_chat_template`` of the same
    messages): what a server that returns ``logprobs`` would send with the answer it generates greedily."""

    def __init__(self, top: int = 20, steps: int = 4):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.torch, self.top, self.steps = torch, top, steps
        self.processor = AutoProcessor.from_pretrained(ROOT / MODEL)
        self.model = AutoModelForImageTextToText.from_pretrained(ROOT / MODEL).eval()
        self.lock = threading.Lock()

    def __call__(self, messages: list[dict], top: int) -> list[dict]:
        chat = [{"role": m["role"], "content": [
            {"type": "image", "url": c["image_url"]["url"]} if c["type"] == "image_url" else c
            for c in m["content"]]} for m in messages]
        inputs = self.processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True, return_tensors="pt")
        return self.of_inputs(inputs, top)

    def of_inputs(self, inputs: dict, top: int) -> list[dict]:
        """The logprobs of the greedy answer to the model's ``inputs`` (ids, pixels) as they are."""
        with self.lock, self.torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=self.steps, do_sample=False, output_logits=True,
                                      return_dict_in_generate=True)
        decode, n = self.processor.tokenizer.decode, inputs["input_ids"].shape[1]
        content = []
        for token, logits in zip(out.sequences[0, n:].tolist(), out.logits):
            logp = self.torch.log_softmax(logits[0].float(), -1)
            values, ids = logp.topk(min(top, self.top))
            content.append({"token": decode([token]), "logprob": float(logp[token]),
                            "top_logprobs": [{"token": decode([int(i)]), "logprob": float(v)}
                                             for v, i in zip(values, ids)]})
        return content


class LocalServer:
    """A threaded HTTP server on a free port of 127.0.0.1, serving on a daemon thread while in ``with``; ``handler``:
    its request handler class. ``url`` is its ``/v1`` base."""

    def __init__(self, handler):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultProxy(LocalServer):
    """A forwarding proxy on 127.0.0.1 in front of ``upstream`` (see the module doc)."""

    def __init__(self, upstream: str, every: int = 0, slow_s: float = 0.0, logprobs: AnswerLogprobs | None = None,
                 answer=None, redirect_to: str | None = None, rewrite=None):
        self.upstream, self.every, self.slow_s, self.logprobs = upstream.rstrip("/"), every, slow_s, logprobs
        #: rewrite(body, reply) -> reply: what the proxy changes in a successful reply (a proxy that moves numbers)
        self.rewrite = rewrite
        #: answer(headers, body) -> (status, bytes) to answer a request itself (as a stricter server would), or None
        self.answer = answer
        #: a base URL every GET (a model list) is redirected to (302, its path after /v1 kept), as a moved server
        #: answers (urllib follows no redirect of a POST with its body)
        self.redirect_to = redirect_to
        self.faults: Counter = Counter()
        self.authorization: Counter = Counter()
        self.requests = 0
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def fault_for(self, body: bytes) -> str | None:
        """The fault of a request's first attempt (None: forward it), chosen by a hash of its body."""
        if not self.every:
            return None
        key = hashlib.sha256(body).hexdigest()
        with self._lock:
            if key in self._seen:
                return None
            self._seen.add(key)
        slot = int(key[:8], 16) % self.every
        kinds = FAULTS if self.slow_s else FAULTS[:-1]
        return kinds[slot] if slot < len(kinds) else None

    def _forward(self, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, bytes, str, str]:
        # a path under /v1 goes under the upstream's /v1, any other beside it (vLLM's /tokenize, llama.cpp's /props)
        url = self.upstream + path.split("/v1", 1)[-1] if "/v1" in path else self.upstream.removesuffix("/v1") + path
        request = urllib.request.Request(url, data=body, method=method,
                                         headers={k: v for k, v in headers.items()
                                                  if k.lower() in ("content-type", "authorization", "accept")})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=120) as reply:
                return (reply.status, reply.read(), reply.headers.get("Content-Type", "application/json"),
                        reply.headers.get("Server"))
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "application/json"), exc.headers.get("Server")

    def _with_logprobs(self, body: bytes, reply: bytes) -> bytes:
        request = json.loads(body)
        if self.logprobs is None or not request.get("logprobs"):
            return reply
        answer = json.loads(reply)
        answer["choices"][0]["logprobs"] = {"content": self.logprobs(request["messages"],
                                                                     int(request.get("top_logprobs") or 1))}
        return json.dumps(answer).encode()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            upstream_server = None

            def log_message(self, *args):  # quiet
                pass

            def version_string(self):  # the upstream's Server header, as a transparent proxy passes it on
                return self.upstream_server or super().version_string()

            def _reply(self, status: int, data: bytes, content_type: str = "application/json", extra: dict = {}):
                self.send_response(status)
                for k, v in {"Content-Type": content_type, "Content-Length": str(len(data)), **extra}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
                with proxy._lock:
                    proxy.requests += 1
                    proxy.authorization[self.headers.get("Authorization")] += 1
                if proxy.redirect_to and method == "GET" and self.path.startswith("/v1"):
                    self._reply(302, b"", extra={"Location": proxy.redirect_to + self.path.removeprefix("/v1")})
                    return
                fault = proxy.fault_for(body) if body else None
                if fault:
                    with proxy._lock:
                        proxy.faults[fault] += 1
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault in ("429", "500", "503"):
                    self._reply(int(fault), b'{"error": "injected by the test proxy"}', extra={"Retry-After": "0"}
                                if fault == "429" else {})
                    return
                own = proxy.answer(dict(self.headers), body) if proxy.answer and body else None
                if own is not None:
                    self._reply(*own)
                    return
                if fault == "slow":
                    time.sleep(proxy.slow_s)
                status, data, content_type, self.upstream_server = proxy._forward(method, self.path, body,
                                                                                 dict(self.headers))
                if status == 200 and body:
                    data = proxy._with_logprobs(body, data)
                    data = proxy.rewrite(body, data) if proxy.rewrite else data
                try:
                    self._reply(status, data, content_type)
                except OSError:  # the client gave up (a slow reply after its timeout)
                    self.close_connection = True

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        return Handler
