"""The embedded checkpoint served by llama.cpp's ``llama-server``, a real server that returns probabilities: its GGUF
files made deterministically by llama.cpp's own converter, the server answering with ``top_logprobs``, the gate run
through it with ECE, floors and |dp| computed, and its option probabilities held against the in-process scorer's.

``llama-server`` is built by ``scripts/build_llama_server.sh`` (``.ci/run`` runs it); where it is absent the tests
that need it skip, saying so. docs/served.md has the measurements these tests pin.
"""

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from helpers.paths import ROOT
from helpers.served_parts import GGUF, AnswerLogprobs, LlamaServer, llama_server_binary, running

#: Rows per dataset of the agreement tests (200 rows: the five fixture sets).
AGREEMENT_ROWS = 40
#: Argmax agreement of llama.cpp with the in-process scorer on those rows, measured 0.880 (176/200): llama.cpp
#: writes the prompt differently (docs/served.md, "llama.cpp"), not a difference of kernels. The rows and the server
#: are deterministic, so the margin is for another llama.cpp build's kernels moving a near tie, not for chance: 0.80
#: is 16 rows of 200 below the measurement (3.5 binomial standard errors), and far above the 0.3 to 0.5 of a
#: model that ignored the prompt.
MIN_AGREEMENT = 0.80
#: On llama.cpp's own prompt (the same ids and pixels in transformers) the two agree on every row, max |dp| 0.0027.
MIN_SAME_PROMPT_AGREEMENT, MAX_SAME_PROMPT_DP = 0.99, 0.01


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    yield from running(lambda binary: LlamaServer(tmp_path_factory.mktemp("llama-server"), binary),
                       llama_server_binary(), "llama-server is not built: `bash scripts/build_llama_server.sh` builds "
                       "it into the virtualenv (about 7 minutes on 2 cores; .ci/run does)")


def test_the_gguf_files_are_made_again_byte_for_byte(tmp_path):
    """``fixtures gguf`` gives the committed files' bytes (made earlier by the same command: the conversion is
    deterministic), and they load in the server."""
    from laya_robustness.recipes.gguf import FILES, default_source

    if not (default_source() / "convert_hf_to_gguf.py").is_file():
        pytest.skip(f"llama.cpp's converter is not unpacked at {default_source()}: `bash scripts/build_llama_server.sh`"
                    " unpacks it")
    command = [sys.executable, "-m", "laya_robustness", "fixtures", "gguf", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (GGUF / name).read_bytes(), name
    assert (GGUF / "model.gguf").stat().st_size + (GGUF / "mmproj.gguf").stat().st_size < 3_000_000


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as reply:
        return json.loads(reply.read())


def _messages(row) -> list[dict]:
    from laya_robustness.scoring.prompt import user_text
    from laya_robustness.scoring.served import data_url

    images = [{"type": "image_url", "image_url": {"url": data_url(im)}} for im in row.images]
    return [{"role": "user", "content": [*images, {"type": "text", "text": user_text(row)}]}]


def test_the_server_answers_with_top_logprobs_and_tokenizes_as_the_processor(llama_server, fixture_rows):
    from transformers import AutoProcessor

    from laya_robustness.scoring.served import ServedScorer, first_answer_token

    scorer = ServedScorer.connect(llama_server.url)
    assert scorer.probabilities and scorer.identity["probabilities"] == "top_logprobs of the first answer token"
    assert scorer.identity["server"] == {"software": "llama.cpp", "owned_by": "llamacpp"}
    row = fixture_rows["colour_choice"][0]
    reply = _post(llama_server.url + "/chat/completions", {"messages": _messages(row), "temperature": 0,
                                                          "max_tokens": 4, "logprobs": True, "top_logprobs": 20})
    top = first_answer_token(reply)
    first = next(e for e in reply["choices"][0]["logprobs"]["content"] if e["token"].strip())
    assert len(top) == 20 and first["token"] == top[0]["token"]  # greedy: the answer's token is the most probable
    # the text of a prompt: llama.cpp renders the checkpoint's template and tokenizes it as the processor does
    processor = AutoProcessor.from_pretrained(ROOT / "laya_fixtures" / "tiny-smolvlm")
    text_only = [{"role": "user", "content": [{"type": "text", "text": "What colour is the square?\nA. red"}]}]
    prompt = _post(llama_server.url.removesuffix("/v1") + "/apply-template", {"messages": text_only})["prompt"]
    assert prompt == processor.apply_chat_template(text_only, add_generation_prompt=True)
    ids = _post(llama_server.url.removesuffix("/v1") + "/tokenize", {"content": prompt, "parse_special": True})
    assert ids["tokens"] == processor.tokenizer(prompt, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def gate(llama_server, tmp_path_factory):
    """The default families at 8 rows per set through llama-server: the run and its report folder."""
    reports = tmp_path_factory.mktemp("llama-gate") / "reports"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-rs", "--scorer",
               "openai", "--endpoint", llama_server.url, "--rows-per-set", "8", "-k", "not benchmark",
               "--report-dir", str(reports)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900), reports


def test_the_gate_through_llama_cpp_computes_what_needs_probabilities(gate):
    result, reports = gate
    assert result.returncode in (0, 1), result.stdout[-4000:]
    assert (f"served model at {result.args[result.args.index('--endpoint') + 1]}" in result.stdout
            and "scored: first answer token, top 20 (top_logprobs of the first answer token)" in result.stdout)
    with gzip.open(reports / "predictions.jsonl.gz", "rt") as fh:
        records = [json.loads(line) for line in fh]
    assert len(records) > 2000 and all(r["probs"] and len(r["probs"]) == len(r["logits"]) for r in records)
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["meta"]["model"]["server"]["software"] == "llama.cpp"
    cells = [cell for family in summary["families"].values() for cell in family.values()
             if isinstance(cell, dict) and "ece" in cell]
    assert cells and all(cell["ece"] is not None and "probabilities" not in cell for cell in cells)
    conditions = json.loads((reports / "invariance.json").read_text())["conditions"]
    assert set(conditions) == {"repeat_batch", "batched", "batched_reversed", "hostile"}
    assert all(c["compared"] == "answer texts and logits" and c["max_abs_dp"] is not None for c in conditions.values())
    checks = json.loads((reports / "checks.json").read_text())["results"]
    deltas = [c for c in checks if c["family"] == "invariance" and c["check"] in ("max_abs_dp", "max_abs_dlogit")]
    assert deltas and all(c["decision"] != "not applicable" and c["value"] is not None for c in deltas)


def _softmax(logits) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def _agreement(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """Argmax agreement of two lists of option probabilities, and |dp| on the option the first chose."""
    chosen = [int(np.argmax(p)) for p in a]
    return (float(np.mean([int(np.argmax(q)) == c for q, c in zip(b, chosen)])),
            np.array([abs(p[c] - q[c]) for p, q, c in zip(a, b, chosen)]))


@pytest.fixture(scope="module")
def agreement_rows(fixture_rows):
    return [r for d in sorted(fixture_rows) for r in fixture_rows[d][:AGREEMENT_ROWS]]


@pytest.fixture(scope="module")
def served_probs(llama_server, agreement_rows):
    from laya_robustness.scoring.served import ServedScorer

    answers = ServedScorer.connect(llama_server.url, concurrency=4).answers(agreement_rows)
    assert all(a.logits is not None for a in answers)
    return [_softmax(a.logits) for a in answers]


def test_llama_cpp_agrees_with_the_in_process_scorer(served_probs, agreement_rows, embedded_scorer):
    """The in-process scorer's option probabilities (each option's whole log-likelihood) against llama.cpp's (its
    first answer token's top_logprobs); the two measures agree on every row in process (docs/served.md)."""
    local = [_softmax(x) for x in embedded_scorer.score_batch(agreement_rows)]
    agreement, dp = _agreement(local, served_probs)
    print(f"\nllama.cpp against in-process on {len(dp)} rows: argmax agreement {agreement:.3f}, |dp| on the chosen "
          f"option median {np.median(dp):.4f}, p90 {np.quantile(dp, 0.9):.4f}, max {dp.max():.4f}")
    assert agreement >= MIN_AGREEMENT, (agreement, np.median(dp), dp.max())


def llama_cpp_inputs(processor, row) -> dict:
    """The ids and pixels llama.cpp's server builds for ``row`` (its chat template rendering and mtmd's Idefics3
    layout), for the checkpoint in transformers: ``User: `` with a space (the image reaches the template as text),
    then per image a 1x1 tile (``<fake_token_around_image><row_1_col_1>`` and 16 image tokens), the ``"\\n\\n"``
    piece, and the overview (``<fake_token_around_image><global-img>``, 16 image tokens,
    ``<fake_token_around_image>``); a 64 px image's tile and overview are the image itself."""
    import torch

    from laya_robustness.scoring.prompt import user_text

    tok = processor.tokenizer
    ids = tok("<|im_start|>User: ", add_special_tokens=False)["input_ids"]
    fake, tile, overview, image = tok.convert_tokens_to_ids(["<fake_token_around_image>", "<row_1_col_1>",
                                                             "<global-img>", "<image>"])
    separator = tok.convert_tokens_to_ids("\u010b")  # the piece the GGUF gives "\n\n" (fixtures/gguf.py)
    pixels = []
    if row.images:
        one = processor.image_processor(images=[list(row.images)], return_tensors="pt")["pixel_values"][0]
        for k in range(len(row.images)):
            ids += [fake, tile, *[image] * 16, separator, fake, overview, *[image] * 16, fake]
            pixels += [one[k], one[k]]
    ids += tok(user_text(row) + "<end_of_utterance>\nAssistant:", add_special_tokens=False)["input_ids"]
    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if pixels:
        inputs["pixel_values"] = torch.stack(pixels)[None]
        inputs["pixel_attention_mask"] = torch.ones(1, len(pixels), *pixels[0].shape[-2:], dtype=torch.bool)
    return inputs


def test_on_llama_cpp_s_own_prompt_the_checkpoint_gives_llama_cpp_s_probabilities(served_probs, agreement_rows):
    """The same ids and pixels in transformers: what is left is llama.cpp's kernels and image decoding."""
    from laya_robustness.scoring.base import to_label_order
    from laya_robustness.scoring.served import first_answer_token, option_logits

    greedy = AnswerLogprobs()
    local = []
    for row in agreement_rows:
        content = greedy.of_inputs(llama_cpp_inputs(greedy.processor, row), 20)
        top = first_answer_token({"choices": [{"logprobs": {"content": content}}]})
        local.append(_softmax(to_label_order(row, option_logits(top, row.shown_options, row.primitive))))
    agreement, dp = _agreement(local, served_probs)
    assert agreement >= MIN_SAME_PROMPT_AGREEMENT and dp.max() <= MAX_SAME_PROMPT_DP, (agreement, dp.max())


def test_every_option_is_among_the_first_answer_token_s_top_logprobs(llama_server, agreement_rows):
    """An option none of the 20 listed tokens fits gets the smallest listed log-probability (an upper bound):
    counted with a sentinel below every listed one. None is missed on these rows (3 options of 3,048 are with the
    option_order, shift and text variants added: docs/served.md)."""
    from laya_robustness.scoring.served import first_answer_token, option_logits

    missed = 0
    for row in agreement_rows[::4]:
        reply = _post(llama_server.url + "/chat/completions", {"messages": _messages(row), "temperature": 0,
                                                              "max_tokens": 4, "logprobs": True, "top_logprobs": 20})
        top = first_answer_token(reply) + [{"token": "\x00", "logprob": -1e9}]
        missed += int((option_logits(top, row.shown_options, row.primitive) == -1e9).sum())
    assert missed == 0


@pytest.mark.parametrize("concurrency", [1, 4])
def test_requests_per_second(llama_server, agreement_rows, concurrency, record_property, capsys):
    """Requests per second at ``concurrency`` (reported, not judged: the machine's load moves it)."""
    from laya_robustness.scoring.served import ServedScorer

    scorer = ServedScorer.connect(llama_server.url, concurrency=concurrency)
    rows = agreement_rows[:100]
    started = time.perf_counter()
    scorer.answers(rows)
    rate = len(rows) / (time.perf_counter() - started)
    record_property("requests_per_second", rate)
    with capsys.disabled():
        print(f"\nllama-server (1 thread, 4 slots): {rate:.0f} requests/s at concurrency {concurrency}")


class _ModelsOwnContext(LlamaServer):
    """llama-server with each slot at the model's own context (512 positions): the hostile prompt is longer."""

    SLOT_CONTEXT = 512


def test_a_condition_longer_than_the_served_context_skips_saying_so(tmp_path):
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built: `bash scripts/build_llama_server.sh` builds it")
    server = _ModelsOwnContext(tmp_path, binary).start()
    try:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-rs",
                               "-p", "no:randomly", "--scorer", "openai", "--endpoint", server.url, "-k",
                               "test_invariance and (hostile or repeat_batch) and not gpu", "--report-dir",
                               str(tmp_path / "reports")], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        server.stop()
    out = " ".join(done.stdout.split())
    # repeat_batch judged (its bitwise check fails on llama.cpp: docs/served.md), hostile skipped: a verdict, no exit 3
    assert done.returncode in (0, 1) and "test_invariance[cpu-repeat_batch]" in done.stdout, done.stdout[-4000:]
    # known from numbers: the prompt's tokens as llama.cpp's refusal counts them (its n_prompt_tokens field), against
    # the slot's context read from /props when the run started, whatever the refusal's message says
    assert "hostile is not supported by this scorer: a prompt of it is longer than the served model's context " \
           "(row hostile/long_text: its prompt of 790 tokens (as the server counted them) and an answer of up to 16 " \
           "do not fit the model's context of 512 (n_ctx of /props))" in out, out[-4000:]
    assert "HARNESS ERROR" not in out and "harness error" not in out  # incomplete only as -k narrowed it
