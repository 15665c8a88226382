"""The exact protocol's reply validator (``scoring.served.prompt_logprobs.answer_turn_logprob``) on reply dicts in
vLLM's shape: a reply counts only when the tokens after the prompt are the option's own followed by the end of a
turn, each with a finite log-probability <= 0. The same faults met through a proxy in front of the real vLLM are in
``tests/served/test_vllm.py``."""

import math

import pytest

from laya_robustness.scoring.served.prompt_logprobs import answer_turn_logprob
from laya_robustness.scoring.served.transport import error_numbers

PROMPT = [1, 40, 41, 42]  # the row's prompt tokens (L = 4)
TURN = [77, 78, 2]  # the option's own tokens, then the end of a turn (id 2)


def scored(ids, values) -> dict:
    """A vLLM reply: ``prompt_token_ids`` and one ``prompt_logprobs`` entry per token (None for the first)."""
    return {"prompt_token_ids": ids,
            "prompt_logprobs": [None] + [{str(t): {"logprob": v, "rank": 1, "decoded_token": "x"}}
                                         for t, v in zip(ids[1:], values)]}


def test_an_answer_turn_is_the_sum_of_its_own_tokens_log_probabilities():
    reply = scored(PROMPT + TURN, [-0.1, -0.2, -0.3, -1.0, -0.5, -0.25])
    assert answer_turn_logprob(reply, PROMPT, TURN) == pytest.approx(-1.75)


@pytest.mark.parametrize("value", [3.0, 1e-9, math.inf, -math.inf, math.nan])
def test_a_log_probability_that_is_not_finite_and_at_most_0_is_refused(value):
    """The end of a turn's entry set to +3.0 (or any number a probability cannot have): no logit is made of it."""
    reply = scored(PROMPT + TURN, [-0.1, -0.2, -0.3, -1.0, -0.5, value])
    with pytest.raises(ValueError, match=rf"token 2 the log-probability {value}, not a finite number <= 0"):
        answer_turn_logprob(reply, PROMPT, TURN)


def test_a_token_after_the_prompt_that_is_not_the_options_own_is_refused():
    """The option's last token changed to another id, with a likely log-probability (-0.01): the reply's ids and
    log-probabilities agree with each other, but not with the option's own tokens."""
    reply = scored(PROMPT + [77, 90, 2], [-0.1, -0.2, -0.3, -1.0, -0.01, -0.25])
    with pytest.raises(ValueError, match=r"the tokens after the prompt are \[77, 90, 2\], not the option's own "
                                         r"followed by the end of a turn: \[77, 78, 2\]"):
        answer_turn_logprob(reply, PROMPT, TURN)


@pytest.mark.parametrize("ids", [PROMPT + TURN[:-1], PROMPT + TURN + [2], PROMPT + [2]])
def test_a_turn_cut_short_or_run_on_is_refused(ids):
    """The end of a turn missing, another token after it, or the option's tokens missing."""
    reply = scored(ids, [-0.5] * (len(ids) - 1))
    with pytest.raises(ValueError, match="not the option's own followed by the end of a turn"):
        answer_turn_logprob(reply, PROMPT, TURN)


def test_a_reply_whose_prompt_is_not_the_rows_is_refused():
    reply = scored([1, 40, 99, 42] + TURN, [-0.5] * 6)
    with pytest.raises(ValueError, match="does not follow the row's prompt token for token"):
        answer_turn_logprob(reply, PROMPT, TURN)


def test_a_log_probability_of_another_token_than_the_ids_is_refused():
    reply = scored(PROMPT + TURN, [-0.5] * 6)
    reply["prompt_logprobs"][-1] = {"3": {"logprob": -0.01}}
    with pytest.raises(ValueError, match="no log-probability of token 2"):
        answer_turn_logprob(reply, PROMPT, TURN)


def test_an_error_bodys_numbers_are_read_as_numbers():
    """llama.cpp's refusal of a prompt past its context: its count in fields, whatever its message says."""
    body = ('{"error": {"code": 400, "message": "anything at all", "type": "exceed_context_size_error", '
            '"n_prompt_tokens": 790, "n_ctx": 512, "flag": true}}')
    assert error_numbers(body) == {"code": 400, "n_prompt_tokens": 790, "n_ctx": 512}
    assert error_numbers('{"detail": "The prompt has 770 tokens"}') == {} == error_numbers("not json")
