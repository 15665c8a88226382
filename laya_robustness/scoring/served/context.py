"""A served model's context known from numbers: how many tokens the model takes, read from the server or the
checkpoint, and how many a row's prompt has, counted by the server or the checkpoint's own processor. A prompt that
does not fit raises ``ContextExceeded``; an error's words never decide it.

- **Its length** (read once, when first needed): vLLM's ``max_model_len`` in its ``/v1/models`` entry; llama.cpp's
  ``default_generation_settings.n_ctx`` at ``/props`` (a slot's context); else, where this machine has the checkpoint
  the model id names (``transformers serve`` lists the directory it serves), its text config's
  ``max_position_embeddings``. Unknown otherwise.
- **A prompt's tokens**: vLLM's ``/tokenize`` of the row's user turn with the generation prompt (its images included,
  as it prompts the model); else the checkpoint's processor on the same turn; on a refusal, first the count the server
  reports in its error's fields (llama.cpp's ``n_prompt_tokens``).
- **Fits**: the prompt and the answer a request asks for (``max_tokens``) within the length. Where the length or the
  count is unknown the server decides, and its refusal is an ``EndpointError`` like any other (exit 3).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

from laya_robustness.rows import Row
from laya_robustness.scoring.prompt import user_text
from laya_robustness.scoring.served.openai_chat import OpenAIChat
from laya_robustness.scoring.served.transport import EndpointError, Transport

#: The HTTP statuses a server refuses a prompt longer than its context with.
REFUSALS = (400, 413, 422)


class ContextExceeded(EndpointError):
    """A row's prompt and its answer do not fit the served model's context, as the numbers show (exit 3 for a
    family's row; an invariance condition skips, saying so)."""


def exceeds_context(exc: BaseException) -> bool:
    """Whether ``exc`` is a prompt known not to fit the served model's context (``ContextExceeded``)."""
    return isinstance(exc, ContextExceeded)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def server_tokens(transport: Transport, model: str, messages: list[dict], once: bool = False,
                  **template: bool) -> list[int]:
    """The token ids of ``messages`` as vLLM's ``/tokenize`` writes them with the chat template (``template``:
    ``add_generation_prompt``, ``continue_final_message``); ``once``: asked as a question whether the server has it
    (``Transport.lookup``). ValueError when the reply is none of its shape, ``EndpointError`` when a request fails."""
    body = {"model": model, "messages": messages, **template}
    reply = transport.lookup("/tokenize", body) if once else transport.call("/tokenize", body, at_root=True)[0]
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens) or \
            reply.get("count") != len(tokens):
        raise ValueError("the server's /tokenize gave no list of token ids with their count")
    return tokens


def _processed(processor, row: Row) -> int:
    """The tokens of ``row``'s user turn with the generation prompt, as ``processor``'s chat template writes them
    (``processor`` False: there is none, an error)."""
    turn = [*({"type": "image", "image": image} for image in row.images), {"type": "text", "text": user_text(row)}]
    ids = processor.apply_chat_template([{"role": "user", "content": turn}], add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]
    return len(ids[0] if ids and isinstance(ids[0], list) else ids)


def _checkpoint(model: str, kind: str):
    """The ``AutoConfig`` or ``AutoProcessor`` (``kind``) of the checkpoint ``model`` names, where this machine has
    it (a directory, or the hub cache; nothing is downloaded), else None."""
    import transformers

    try:
        return getattr(transformers, kind).from_pretrained(model, local_files_only=True)
    except Exception:  # noqa: BLE001  (no checkpoint here by that name, or not one transformers reads)
        return None


class ServedContext:
    """The context of ``model`` behind ``transport`` (see the module doc); ``entry``: its ``/v1/models`` entry,
    ``max_tokens``: the answer a row's request asks for."""

    def __init__(self, transport: Transport, model: str, entry: Mapping[str, Any], max_tokens: int):
        self.transport, self.model, self.entry, self.max_tokens = transport, model, entry, max_tokens
        self._lock = threading.Lock()
        self._length: tuple[int | None, str] | None = None
        #: Whether the server counts (None until it is asked), and the checkpoint's processor (False: none here).
        self._server_counts: bool | None = None
        self._processor: Any = None
        self._turn = OpenAIChat(transport, model).content

    def length(self) -> tuple[int | None, str]:
        """(the model's context in tokens, where that is read) or (None, "") where nothing says."""
        with self._lock:
            if self._length is None:
                self._length = self._read_length()
            return self._length

    def _read_length(self) -> tuple[int | None, str]:
        if _count(self.entry.get("max_model_len")):
            return self.entry["max_model_len"], "max_model_len of /v1/models"
        settings = (self.transport.lookup("/props") or {}).get("default_generation_settings")
        if isinstance(settings, dict) and _count(settings.get("n_ctx")):
            return settings["n_ctx"], "n_ctx of /props"
        config = _checkpoint(self.model, "AutoConfig")
        positions = getattr(config.get_text_config(), "max_position_embeddings", None) if config else None
        return (positions, f"max_position_embeddings of {self.model}'s config") if _count(positions) else (None, "")

    def count(self, row: Row) -> tuple[int, str] | None:
        """(the tokens of ``row``'s prompt, who counted them), or None where neither the server nor a checkpoint can
        count them."""
        if self._server_counts is not False:
            counted = self._by_server(row)
            if counted is not None:
                return counted, "counted by the server's /tokenize"
        with self._lock:
            if self._processor is None:
                self._processor = _checkpoint(self.model, "AutoProcessor") or False
        try:
            return _processed(self._processor, row), "counted by the checkpoint's processor"
        except Exception:  # noqa: BLE001  (no processor here, or one whose chat template takes no such turn)
            return None

    def _by_server(self, row: Row) -> int | None:
        """The server's count of ``row``'s prompt (the first asked once, as a question whether it counts)."""
        messages = [{"role": "user", "content": self._turn(row)}]
        try:
            counted = len(server_tokens(self.transport, self.model, messages, once=self._server_counts is None,
                                        add_generation_prompt=True))
        except (EndpointError, ValueError):
            counted = None
        if self._server_counts is None:
            self._server_counts = counted is not None
        return counted

    def check(self, rows: Sequence[Row]) -> None:
        """``ContextExceeded`` for the first of ``rows`` whose prompt and answer are known not to fit the context."""
        length, source = self.length()
        for row in rows if length is not None else ():
            counted = self.count(row)
            if counted is not None and counted[0] + self.max_tokens > length:
                raise self._exceeded(row, counted, length, source)

    def refusal(self, exc: EndpointError, row: Row) -> ContextExceeded | None:
        """``exc``, the server refusing ``row``'s request, as ``ContextExceeded`` where the numbers show that its
        prompt does not fit; None where they do not (the refusal is then an error like any other)."""
        length, source = self.length() if exc.status in REFUSALS else (None, "")
        if length is None:
            return None
        reported = exc.numbers.get("n_prompt_tokens")
        counted = (reported, "as the server counted them") if _count(reported) else self.count(row)
        if counted is None or counted[0] + self.max_tokens <= length:
            return None
        return self._exceeded(row, counted, length, source, f"; the server answered: {exc.detail}")

    def _exceeded(self, row: Row, counted: tuple[int, str], length: int, source: str,
                  said: str = "") -> ContextExceeded:
        detail = (f"row {row.row_id}: its prompt of {counted[0]:,} tokens ({counted[1]}) and an answer of up to "
                  f"{self.max_tokens} do not fit the model's context of {length:,} ({self.transport.scrub(source)})")
        return ContextExceeded(f"{self.transport.endpoint}: {detail}{said}", 400, detail)
