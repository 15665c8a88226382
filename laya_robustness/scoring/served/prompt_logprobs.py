"""The exact protocol of a server that returns the log-probabilities of a prompt's own tokens (vLLM's
``prompt_logprobs``): each option's logit is the log-likelihood of its answer turn after the row's prompt, the
quantity the in-process scorer computes, not a reading of the first answer token's ``top_logprobs``.

- **The row's prompt**: one chat request, the row's user turn as ``openai_chat`` sends it (images as PNG data URLs,
  then ``scoring.prompt.user_text``) with the generation prompt, greedy, ``max_tokens`` 16; its answer text is the
  record's (the extraction reads it) and its ``prompt_token_ids`` are the prompt's tokens (``L`` of them).
- **Each option**: the same user turn, then the assistant turn ``option + <end of turn>`` continued as it stands
  (``continue_final_message``, no generation prompt), ``prompt_logprobs`` 0 and ``return_token_ids``: the option's
  logit is the sum of the log-probabilities of the prompt tokens after the first ``L`` (the chat template writes
  the separator: " Red" after "Assistant:", no space after a newline, as ``scoring.prompt`` does in process).
  The options are asked after the prompt, so the server's prefix cache holds the image prefix they share.
- **The end of a turn**: read once, when connecting, as the template writes it: the first token after an answer in
  a whole assistant turn (``<end_of_utterance>`` for SmolVLM), so a model's own end token is scored, as in process;
  its id is kept.
- **A reply is checked before it counts** (``answer_turn_logprob``): its first ``L`` tokens are the prompt's, the
  tokens after them are the option's own followed by the end of a turn, and each of their log-probabilities is a
  finite number <= 0; else the row fails (``EndpointError`` naming the endpoint, the row, the option and what was
  wrong: exit 3), never a logit. An option's own tokens are known apart from the reply that scores it: the server's
  ``/tokenize`` of a text conversation, its answer turn ``option + <end of turn>`` continued, after the same
  conversation with the generation prompt (once per option text; a chat template closes the user turn with a
  token of its own, so what follows it is tokenized alike whatever the turn held).
- **Applies** when the probe's reply carries ``prompt_logprobs`` and ``prompt_token_ids`` in that shape, the end of
  a turn can be read, and the server's ``/tokenize`` gives the probe's tokens as its scored reply does; any other
  server (one that ignores the fields, refuses them, or has no ``/tokenize``) is spoken to in ``openai_chat``.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring.base import Answer, label_choice
from laya_robustness.scoring.extraction import EXTRACTION_RULES, extract
from laya_robustness.scoring.served.context import server_tokens
from laya_robustness.scoring.served.openai_chat import (
    MAX_TOKENS,
    PROMPT_FORMAT,
    OpenAIChat,
    chat_completion,
    kept_answer,
    message_text,
)
from laya_robustness.scoring.served.transport import EndpointError, Transport

#: What a run through this protocol measures (the reports' ``scored``), and what it uses of the server.
SCORED = "option log-likelihood, exact"
PROBABILITIES = "prompt_logprobs of each option's answer turn after the prompt (continue_final_message)"
#: The conversation the probe asks to be scored, and its answer.
PROBE_USER, PROBE_ANSWER = "Is this a question?\nAnswer no or yes.", "yes"
PROBE_TURN = {"role": "user", "content": [{"type": "text", "text": PROBE_USER}]}


def prompt_tokens(reply: Mapping[str, Any]) -> tuple[list[int], list]:
    """(``prompt_token_ids``, ``prompt_logprobs``) of a reply; ValueError when either is missing or not of vLLM's
    shape (a list of ids; one entry per prompt token, each None or ``{token id: {"logprob": ...}}``).

    >>> prompt_tokens({"prompt_token_ids": [1, 5], "prompt_logprobs": [None, {"5": {"logprob": -0.5}}]})
    ([1, 5], [None, {'5': {'logprob': -0.5}}])
    >>> prompt_tokens({"prompt_token_ids": [1, 5]})
    Traceback (most recent call last):
      ...
    ValueError: the reply has no prompt_logprobs with one entry per prompt token
    """
    ids, logprobs = reply.get("prompt_token_ids"), reply.get("prompt_logprobs")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError("the reply has no prompt_token_ids")
    if not isinstance(logprobs, list) or len(logprobs) != len(ids):
        raise ValueError("the reply has no prompt_logprobs with one entry per prompt token")
    if not all(entry is None or isinstance(entry, Mapping) for entry in logprobs):
        raise ValueError("prompt_logprobs is not a list of {token id: logprob} objects: "
                         f"{json.dumps(logprobs)[:200]}")
    return ids, logprobs


def token_logprob(entry: Mapping[str, Any] | None, token: int) -> float:
    """The log-probability of ``token`` in one ``prompt_logprobs`` entry; ValueError when it is not there or not a
    finite number <= 0.

    >>> token_logprob({"7": {"logprob": -1.25, "rank": 2}}, 7)
    -1.25
    >>> token_logprob({"7": {"logprob": 3.0}}, 7)
    Traceback (most recent call last):
      ...
    ValueError: prompt_logprobs gives token 7 the log-probability 3.0, not a finite number <= 0
    """
    found = (entry or {}).get(str(token))
    value = found.get("logprob") if isinstance(found, Mapping) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"prompt_logprobs has no log-probability of token {token}")
    if not math.isfinite(value) or value > 0:
        raise ValueError(f"prompt_logprobs gives token {token} the log-probability {value}, not a finite number <= 0")
    return float(value)


def answer_turn_logprob(reply: Mapping[str, Any], prompt: Sequence[int], turn: Sequence[int]) -> float:
    """The log-likelihood of an answer turn in a scored reply: the sum of the log-probabilities of its tokens after
    ``prompt``, which must be ``turn`` (the option's own tokens, then the end of a turn), each finite and <= 0;
    ValueError saying what is wrong otherwise.

    >>> reply = {"prompt_token_ids": [1, 5, 9],
    ...          "prompt_logprobs": [None, {"5": {"logprob": -1.0}}, {"9": {"logprob": -0.5}}]}
    >>> answer_turn_logprob(reply, [1], [5, 9])
    -1.5
    >>> answer_turn_logprob(reply, [1], [6, 9])
    Traceback (most recent call last):
      ...
    ValueError: the tokens after the prompt are [5, 9], not the option's own followed by the end of a turn: [6, 9]
    """
    ids, logprobs = prompt_tokens(reply)
    if ids[:len(prompt)] != list(prompt):
        raise ValueError("the answer turn does not follow the row's prompt token for token, so its tokens cannot be "
                         "told apart")
    if ids[len(prompt):] != list(turn):
        raise ValueError(f"the tokens after the prompt are {ids[len(prompt):][:40]}, not the option's own followed by "
                         f"the end of a turn: {list(turn)}")
    return sum(token_logprob(logprobs[i], ids[i]) for i in range(len(prompt), len(ids)))


class PromptLogprobs:
    """Rows asked of a server that scores prompts (see the module doc); build it with :meth:`connect`. Open-answer
    rows are generated through ``chat`` (``openai_chat``)."""

    probabilities = True

    def __init__(self, transport: Transport, model: str, end_of_turn: str, max_tokens: int = MAX_TOKENS):
        self.transport, self.model, self.end_of_turn, self.max_tokens = transport, model, end_of_turn, max_tokens
        self.chat = OpenAIChat(transport, model, max_tokens)
        #: The end of a turn's token id, and the probe's user turn with the generation prompt as /tokenize writes it.
        self.end_of_turn_id: int | None = None
        self._asked: list[int] = []
        self._turns: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, transport: Transport, model: str, entry: Mapping[str, Any], server: str,
                max_tokens: int = MAX_TOKENS) -> "PromptLogprobs | None":
        """The protocol of ``model`` where the server scores prompts (the probe: a text conversation whose answer
        turn is scored whole and continued, which also gives the end of a turn, and its tokens as ``/tokenize``
        writes them); None where it does not."""
        protocol = cls(transport, model, "", max_tokens)
        try:
            continued = prompt_tokens(protocol._scored([PROBE_TURN], PROBE_ANSWER, continued=True))[0]
            whole, logprobs = prompt_tokens(protocol._scored([PROBE_TURN], PROBE_ANSWER, continued=False))
            return protocol if protocol._ends_turns(continued, whole, logprobs) and protocol._tokenizes(whole) else None
        except (EndpointError, ValueError):
            return None

    def _ends_turns(self, continued: list[int], whole: list[int], logprobs: list) -> bool:
        """Whether the whole turn extends the continued one with an end of a turn, which is then kept."""
        if len(whole) <= len(continued) or whole[:len(continued)] != continued:
            return False
        end = (logprobs[len(continued)] or {}).get(str(whole[len(continued)]))
        text = end.get("decoded_token") if isinstance(end, Mapping) else None
        if not isinstance(text, str) or not text.strip():
            return False
        self.end_of_turn, self.end_of_turn_id = text, whole[len(continued)]
        return True

    def _tokenizes(self, whole: list[int]) -> bool:
        """Whether the server's ``/tokenize`` writes the probe's whole turn as its scored reply did; the probe's turn
        with the generation prompt is then kept (what an option's answer turn follows)."""
        answered = [PROBE_TURN, {"role": "assistant", "content": PROBE_ANSWER}]
        written = server_tokens(self.transport, self.model, answered, once=True, add_generation_prompt=False)
        self._asked = server_tokens(self.transport, self.model, [PROBE_TURN], add_generation_prompt=True)
        return written == whole and whole[:len(self._asked)] == self._asked

    def _turn(self, option: str) -> list[int]:
        """The tokens of ``option``'s answer turn after a prompt (the option's own, then the end of a turn), from the
        server's ``/tokenize`` of the probe's conversation, once per option text; ValueError where they do not show."""
        with self._lock:
            known = self._turns.get(option)
        if known is None:
            answered = [PROBE_TURN, {"role": "assistant", "content": option + self.end_of_turn}]
            ids = server_tokens(self.transport, self.model, answered, add_generation_prompt=False,
                                continue_final_message=True)
            known = ids[len(self._asked):]
            if ids[:len(self._asked)] != self._asked or len(known) < 2 or known[-1] != self.end_of_turn_id:
                raise ValueError("the server's /tokenize does not write its answer turn as its own tokens followed by "
                                 f"the end of a turn ({self.end_of_turn_id}): {ids[len(self._asked) - 1:][:40]}")
            with self._lock:
                self._turns[option] = known
        return known

    def identity(self) -> dict:
        """The protocol's part of the scorer's identity: the prompt, what is scored and how, the end of a turn."""
        return {"prompt_format": PROMPT_FORMAT, "extraction_rules": EXTRACTION_RULES, "max_tokens": self.max_tokens,
                "scored": SCORED, "probabilities": PROBABILITIES, "end_of_turn": self.transport.scrub(self.end_of_turn)}

    # -- requests -------------------------------------------------------------------------------

    def _scored(self, messages: list[dict], answer: str | None, continued: bool = True,
                max_tokens: int = 1) -> dict:
        """A chat request whose prompt's tokens are scored: ``messages``, then the assistant turn ``answer``
        (continued as it stands, or written whole) or, without one, the generation prompt."""
        body: dict[str, Any] = {"model": self.model, "temperature": 0, "max_tokens": max_tokens,
                                "prompt_logprobs": 0, "return_token_ids": True}
        if answer is None:
            body.update(messages=messages, add_generation_prompt=True)
        else:
            body.update(messages=[*messages, {"role": "assistant", "content": answer}], add_generation_prompt=False,
                        continue_final_message=continued)
        return chat_completion(self.transport, body)

    # -- answering rows -------------------------------------------------------------------------

    def answer(self, row: Row) -> Answer:
        """One row answered: the generated text and the option it names, and each option's exact logit (label
        order)."""
        where = f"{self.transport.endpoint}/chat/completions: row {row.row_id}"
        messages = [{"role": "user", "content": self.chat.content(row)}]
        reply = self._scored(messages, None, max_tokens=self.max_tokens)
        try:
            prompt = prompt_tokens(reply)[0]
        except ValueError as exc:
            raise EndpointError(f"{where}: {self.transport.scrub(str(exc))}") from None
        logits = np.array([self._option(messages, option, prompt, where) for option in row.options])
        text = self.transport.scrub(message_text(reply), None, lines=True)
        self.transport.count("rows")
        extraction = extract(text, row.shown_options, row.primitive)
        return Answer(kept_answer(text), label_choice(row, extraction.index), extraction.rule, logits)

    def _option(self, messages: list[dict], option: str, prompt: Sequence[int], where: str) -> float:
        """The log-likelihood of ``option``'s answer turn after ``prompt`` (the row's prompt tokens), its reply checked
        (``answer_turn_logprob``); ``EndpointError`` naming ``where`` (the endpoint and row) and the option."""
        try:
            turn = self._turn(option)
            return answer_turn_logprob(self._scored(messages, option + self.end_of_turn), prompt, turn)
        except ValueError as exc:
            raise EndpointError(f"{where}: {self.transport.scrub(f'option {option!r}: {exc}')}") from None

    def generated(self, row: Row, max_new_tokens: int) -> str:
        """The generated text of ``row`` (an open-answer row), as ``openai_chat`` asks for it."""
        return self.chat.generated(row, max_new_tokens)
