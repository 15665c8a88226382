"""A model behind a real OpenAI-compatible server: ``transformers serve`` of the embedded checkpoint on 127.0.0.1
(one for the whole session), the gate run end to end through it, faults from a forwarding proxy in front of it,
a killed server and ``--resume``, a dead endpoint, and the answers against the in-process scorer's generation."""

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laya_robustness.records import NO_PROBABILITIES
from laya_robustness.report.wrapping import unwrap

from helpers.paths import ROOT
from helpers.records import read_records
from helpers.served_parts import FAULTS, AnswerLogprobs, FaultProxy, free_port

KEY_ENV = "LAYA_SERVED_TEST_KEY"
KEY = "sk-planted-3f9a1c7e5b2d40861e2c"
#: The gate's options of the uninterrupted run and of the killed and resumed one (the same rows and scoring).
#: A family of each kind a served model meets: options reordered, the study's three modalities, and a dual-encoder
#: probe it cannot take.
FAMILIES = "option_order,shift,rephrase,language,lgip_paraphrase"
COMMON = ("--scorer", "openai", "--api-key-env", KEY_ENV, "--rows-per-set", "1", "--request-timeout", "2",
          "--families", FAMILIES)
LGIP_REASON = "which a chat model behind a server does not give"
#: Why the hostile condition skips through the served embedded checkpoint (its prompt counted, its context read).
HOSTILE_DETAIL = ("row hostile/long_text: its prompt of 770 tokens (counted by the checkpoint's processor) and an "
                  "answer of up to 16 do not fit the model's context of 512 (max_position_embeddings of "
                  "laya_fixtures/tiny-smolvlm's config)")
HOSTILE_SKIP = f"hostile is not supported by this scorer: a prompt of it is longer than the served model's context " \
               f"({HOSTILE_DETAIL})"


def run_gate(*args, wait=True, extra_env=None):
    """``pytest robustness_tests`` in a subprocess from the repository root (its thresholds), the key planted."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           KEY_ENV: KEY, **(extra_env or {})}
    command = [sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:cacheprovider", "-rs", *args]
    if not wait:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)


def texts_written(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` as text (gzip files decompressed)."""
    out = {}
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            out[str(path)] = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", "replace")
    return out


@pytest.fixture(scope="module")
def uninterrupted(served_model, tmp_path_factory):
    """FAMILIES on one row per set, through a proxy that injects every fault, with max_ece set on
    option_order (a limit a generation-only scorer cannot have): the result, the proxy and the report folder."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    limits = folder / "limits.toml"
    limits.write_text((ROOT / "thresholds.toml").read_text().replace(
        "[families.option_order]\n", "[families.option_order]\nmax_ece = 0.2\n"))
    with FaultProxy(served_model.url, every=12, slow_s=3.0) as proxy:
        result = run_gate(*COMMON, "--endpoint", proxy.url, "--invariance-rows", "2", "--thresholds", str(limits),
                          "-k", "not (variant_build or attention_mask)", "--benchmark-disable",
                          "--report-dir", str(folder / "reports"))
    return result, proxy, folder / "reports"


def test_the_families_run_through_a_faulty_proxy(uninterrupted):
    result, proxy, reports = uninterrupted
    out = result.stdout + result.stderr
    assert result.returncode in (0, 1), out[-4000:]
    assert "generation-only (the server returns no top_logprobs)" in out
    assert all(proxy.faults[kind] >= 1 for kind in FAULTS), proxy.faults  # every fault was made and retried past
    assert set(proxy.authorization) == {f"Bearer {KEY}"}  # the key from --api-key-env went with every request
    recs = read_records(reports)
    assert len(recs) > 60 and all(isinstance(r["raw_answer"], str) and r["probs"] == [] for r in recs)
    assert {r["extraction"] for r in recs} <= {"letter", "letter_text", "text", "unparsed"}
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["meta"]["model"]["model"] == "laya_fixtures/tiny-smolvlm"  # the endpoint's only model
    assert summary["meta"]["model"]["extraction_rules"] == "laya-extract-1"
    cell = summary["families"]["option_order"]["colour_choice"]
    assert cell["ece"] is None and cell["flip_floor"] is None and cell["probabilities"] == NO_PROBABILITIES
    assert cell["acc"] is not None and cell["flip"] is not None


def test_served_check_matches_the_served_run_with_the_checkpoint_in_process(uninterrupted, tmp_path):
    """``served-check``: the served run asked the questions the checkpoint in process asks (every one matched, the
    same question), and says it cannot check the weights; no probabilities, so no |dp|."""
    import laya_robustness
    from laya_robustness.report.read_back import read_folder
    from laya_robustness.report.served_check import served_check

    families = [f for f in FAMILIES.split(",") if f != "lgip_paraphrase"]
    laya_robustness.run_gate(families=families, rows_per_set=1, invariance=False, limitations="none", root=ROOT,
                             report_dir=tmp_path / "inprocess")
    served, inprocess = read_folder(uninterrupted[2]), read_folder(tmp_path / "inprocess")
    check = served_check(served, inprocess)
    assert check.not_comparable == [], check.not_comparable
    assert sum(f.matched for f in check.families) == len(served.records) == len(inprocess.records)
    assert all(f.dps == () for f in check.families) and check.weights.startswith("weights: not checked (SERVED")
    assert check.status == (1 if any(f.agreement < 0.95 for f in check.families) else 0)


def test_a_limit_that_needs_probabilities_is_not_applicable_and_says_why(uninterrupted):
    result, _, reports = uninterrupted
    checks = json.loads((reports / "checks.json").read_text())["results"]
    ece = [r for r in checks if r["check"] == "max_ece"]
    assert len(ece) == 5 and all(r["decision"] == "not applicable" and r["value"] is None for r in ece)
    assert all(NO_PROBABILITIES in r["detail"] for r in ece)
    deltas = [r for r in checks if r["family"] == "invariance" and r["check"] in ("max_abs_dp", "max_abs_dlogit")]
    assert deltas and all(r["decision"] == "not applicable" for r in deltas)
    assert "the max_ece limit are n/a" in result.stdout


def test_families_a_chat_model_cannot_answer_and_conditions_a_server_cannot_run_skip_saying_why(uninterrupted):
    result, _, reports = uninterrupted
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any(LGIP_REASON in line and "lgip_paraphrase probes" in line for line in skips)  # the lgip family
    assert any(LGIP_REASON in line and "test_dual_invariance probes" in line for line in skips)
    for reason in ("has no predict path", "prefix (KV) cache", "cast to bf16", "no one-pass and per-option paths"):
        assert any(reason in line for line in skips), reason
    conditions = json.loads((reports / "invariance.json").read_text())["conditions"]
    assert set(conditions) == {"repeat_batch", "batched", "batched_reversed"}
    assert all(c["compared"] == "answer texts" and c["rows"] == 5 for c in conditions.values())
    assert all(c["bitwise"] and c["flips"] == 0 for c in conditions.values())  # the server answers the same
    # the hostile neighbours hold a prompt past the checkpoint's 512 positions: known from numbers, asked of no server
    assert any(HOSTILE_SKIP in line for line in skips), [line for line in skips if "hostile" in line]


def test_a_refusal_is_read_by_the_numbers_not_by_its_words(served_model, fixture_rows):
    """A prompt's length against the model's context decides, never an error's words: the hostile neighbour of 770
    tokens is known not to fit the checkpoint's 512 positions before it is asked (so the same on a server that answers
    past its context and on one that refuses it), and a short row refused in words that speak of context length is an
    error like any other (exit 3), since its prompt fits."""
    from laya_robustness.run.pipeline.invariance import hostile_rows
    from laya_robustness.scoring.served import ContextExceeded, EndpointError, ServedScorer, exceeds_context

    rows = [fixture_rows[name][0] for name in sorted(fixture_rows)]
    long_text = hostile_rows(rows)[0]

    def refuses_rows(headers, body):  # the probes pass; a row's request is refused with a context's words
        refusal = b'{"detail": "This model\'s maximum context length is 512 tokens: too many tokens"}'
        return (400, refusal) if b"What colour" in body else None

    with FaultProxy(served_model.url, answer=refuses_rows) as proxy:
        scorer = ServedScorer.connect(proxy.url)
        scorer.check_context(rows)  # every row's prompt fits: nothing raised
        with pytest.raises(ContextExceeded) as beyond:
            scorer.check_context([long_text])
        with pytest.raises(EndpointError) as refused:
            scorer.answers([rows[0]])
    assert beyond.value.detail == HOSTILE_DETAIL and str(beyond.value).endswith(HOSTILE_DETAIL)
    assert "HTTP 400" in str(refused.value) and not exceeds_context(refused.value)


def test_the_api_key_is_in_no_file_the_run_writes_and_no_line_it_prints(uninterrupted):
    result, _, reports = uninterrupted
    written = texts_written(reports)
    assert {"summary.json", "predictions.jsonl.gz", "checks.json", "invariance.json", "report.html",
            "summary.md"} <= {Path(p).name for p in written}
    leaks = [path for path, text in written.items() if KEY in text]
    assert not leaks and KEY not in result.stdout + result.stderr


def test_a_killed_server_stops_the_run_and_resume_finishes_it_with_the_same_predictions(
        served_model, uninterrupted, tmp_path):
    reports, journal = tmp_path / "reports", tmp_path / "reports" / "journal"
    args = (*COMMON, "-k", "not (invariance or benchmark)", "--report-dir", str(reports))
    run = run_gate(*args, "--endpoint", served_model.url, wait=False)
    deadline = time.time() + 600
    while time.time() < deadline and sum(1 for f in journal.glob("*.jsonl") for _ in f.open()) < 30:
        time.sleep(0.2)
    served_model.kill()
    try:
        out, _ = run.communicate(timeout=300)
    finally:
        served_model.start()  # the same port: the restarted server (the later tests use it too)
    assert run.returncode == 3, out[-4000:]
    said = "\n".join(unwrap(out.splitlines()))  # the terminal's lines, wrapped to its width, joined back
    assert f"the endpoint {served_model.url} does not answer" in said and "HARNESS ERROR" in said
    journaled = {json.loads(line)["key"] for f in journal.glob("*.jsonl") for line in f.open()}
    summary = json.loads((reports / "summary.json").read_text())
    assert len(journaled) >= 30 and summary["meta"]["complete"] is False  # every answered row is in the journal
    assert not [p for p, text in texts_written(tmp_path).items() if KEY in text] and KEY not in out

    with FaultProxy(served_model.url) as counting:
        resumed = run_gate(*args, "--endpoint", counting.url, "--resume")
    assert resumed.returncode in (0, 1), resumed.stdout[-4000:]
    asked = counting.requests - 3  # the model list, the prompt-scoring probe and the capability probe
    total = len(read_records(reports))
    assert asked == total - len(journaled)  # only the rows the journal lacked were asked again
    assert (reports / "predictions.jsonl.gz").read_bytes() == (uninterrupted[2] / "predictions.jsonl.gz").read_bytes()


def test_a_dead_endpoint_is_exit_3_before_collection_naming_it(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    result = run_gate("--scorer", "openai", "--endpoint", endpoint, "--report-dir", str(tmp_path / "reports"))
    out = result.stdout + result.stderr
    assert result.returncode == 3, out[-3000:]
    assert f"harness error (exit 3, not a gate failure): cannot load scorer 'openai'" in out
    assert f"the endpoint {endpoint} does not answer: ConnectionRefusedError" in out
    assert "collected" not in out and not (tmp_path / "reports").exists()  # stopped before collecting anything


def test_served_answers_agree_with_the_in_process_scorers_greedy_generation(served_model, fixture_rows,
                                                                             embedded_scorer):
    from laya_robustness.families import build_variants
    from laya_robustness.scoring.base import label_choice
    from laya_robustness.scoring.extraction import extract
    from laya_robustness.scoring.served import ServedScorer

    rows = [r for d in sorted(fixture_rows) for r in fixture_rows[d][:24]]
    rows += [v for d in sorted(fixture_rows) for v in build_variants("option_order", fixture_rows[d][:6], 0)]
    served = ServedScorer.connect(served_model.url).answers(rows)
    local = embedded_scorer.generate(rows, max_new_tokens=16)
    same_text = sum(a.text.strip() == b.strip() for a, b in zip(served, local))
    same_choice = sum(a.choice == label_choice(r, extract(b, r.shown_options, r.primitive).index)
                      for a, b, r in zip(served, local, rows))
    assert len(rows) > 200 and same_choice / len(rows) >= 0.99, (same_choice, same_text, len(rows))


def test_probabilities_come_from_the_top_logprobs_a_server_returns(served_model, fixture_rows, tmp_path):
    from laya_robustness.scoring.served import ServedScorer

    rows = [r for d in sorted(fixture_rows) for r in fixture_rows[d][:4]]
    with FaultProxy(served_model.url, logprobs=AnswerLogprobs()) as proxy:
        scorer = ServedScorer.connect(proxy.url)
        assert scorer.probabilities and scorer.identity["probabilities"] == "top_logprobs of the first answer token"
        answers = scorer.answers(rows)
        result = run_gate("--scorer", "openai", "--endpoint", proxy.url, "--families", "option_order",
                          "--rows-per-set", "1", "--invariance-rows", "1", "-k", "not benchmark",
                          "--report-dir", str(tmp_path / "reports"))
    assert all(a.logits is not None and len(a.logits) == len(r.options) for a, r in zip(answers, rows))
    # the greedy answer's first token is the most probable one: the text and the logits name the same option
    assert all(a.choice == int(a.logits.argmax()) for a in answers), [(a.text, a.logits) for a in answers]
    assert result.returncode in (0, 1), result.stdout[-3000:]
    assert "scored: first answer token, top 20 (top_logprobs of the first answer token)" in result.stdout
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    cell = summary["families"]["option_order"]["colour_choice"]
    assert cell["ece"] is not None and "probabilities" not in cell
    conditions = json.loads((tmp_path / "reports" / "invariance.json").read_text())["conditions"]
    assert conditions["repeat_batch"]["max_abs_dp"] == 0.0


def test_a_server_that_refuses_logprobs_gives_a_generation_only_scorer(served_model):
    from laya_robustness.scoring.served import ServedScorer

    def strict(headers, body):  # a server that rejects the fields it does not know, as vLLM's schema does
        return (400, b'{"error": "unknown field: logprobs"}') if b'"logprobs"' in body else None

    with FaultProxy(served_model.url, answer=strict) as proxy:
        scorer = ServedScorer.connect(proxy.url)
    assert not scorer.probabilities
    assert scorer.identity["probabilities"] == f"none: {NO_PROBABILITIES} (the server refused logprobs: HTTP 400)"


def test_the_api_key_is_scrubbed_from_an_error_that_echoes_it(served_model, monkeypatch):
    from laya_robustness.scoring.served import EndpointError, ServedScorer

    def echo(headers, body):  # a reply that quotes the request's credentials back
        return 401, json.dumps({"error": f"bad credentials: {headers.get('Authorization')}"}).encode()

    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultProxy(served_model.url, answer=echo) as proxy, pytest.raises(EndpointError) as raised:
        ServedScorer.connect(proxy.url, api_key_env=KEY_ENV)
    assert "401" in str(raised.value) and "Bearer [the API key]" in str(raised.value) and KEY not in str(raised.value)


def test_a_redirect_to_another_host_is_refused_and_gets_no_key(served_model, monkeypatch):
    """The endpoint answers 302 to another server (a proxy in front of the same real one, so following it would
    work): refused naming both URLs, and the other server sees no request at all, so never the key; the gate run
    ends with exit 3 in seconds. A redirect within the endpoint's origin is followed."""
    from laya_robustness.scoring.served import RedirectRefused, ServedScorer

    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultProxy(served_model.url) as elsewhere, FaultProxy(served_model.url, redirect_to=elsewhere.url) as moved:
        with pytest.raises(RedirectRefused) as raised:
            ServedScorer.connect(moved.url, api_key_env=KEY_ENV)
        assert f"{moved.url}/models redirected (HTTP 302) to {elsewhere.url}/models, another host or port" in \
            str(raised.value)
        started = time.monotonic()
        result = run_gate(*COMMON, "--endpoint", moved.url, "--report-dir", "reports-redirected")
        took = time.monotonic() - started
        assert elsewhere.requests == 0 and moved.requests >= 2
    assert result.returncode == 3, result.stdout[-3000:]
    assert f"redirected (HTTP 302) to {elsewhere.url}/models" in result.stdout and KEY not in result.stdout
    assert took < 60
    with FaultProxy(served_model.url) as same:
        same.redirect_to = same.url.replace("/v1", "/moved/v1")
        scorer = ServedScorer.connect(same.url, api_key_env=KEY_ENV)
        assert scorer.model_id == "laya_fixtures/tiny-smolvlm" and same.authorization[f"Bearer {KEY}"] >= 2


def test_the_key_is_scrubbed_before_an_error_body_is_cut(served_model, monkeypatch):
    """An error body that echoes the key across the 400-character cut: no part of the key survives."""
    from laya_robustness.scoring.served import EndpointError, ServedScorer

    def echo_at_the_cut(headers, body):
        return 400, (b"x" * 390 + headers.get("Authorization", "").encode() + b" and more")

    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultProxy(served_model.url, answer=echo_at_the_cut) as proxy, pytest.raises(EndpointError) as raised:
        ServedScorer.connect(proxy.url, api_key_env=KEY_ENV)
    assert "sk-" not in str(raised.value) and str(raised.value).endswith("x" * 390 + "Bearer [th")


def test_a_model_the_endpoint_does_not_serve_is_named_at_once(served_model):
    from laya_robustness.scoring.base import ModelLoadError
    from laya_robustness.scoring.served import ServedScorer

    listed = r"--model: 'gpt-9' is not among the models .*\(laya_fixtures/tiny-smolvlm\)"
    with pytest.raises(ModelLoadError, match=listed):
        ServedScorer.connect(served_model.url, "gpt-9")


@pytest.mark.slow
def test_the_default_families_on_24_rows_per_set_run_through_the_server(served_model, tmp_path):
    """The release configuration's size (about 8,000 requests: minutes); runs with -m slow."""
    result = run_gate("--scorer", "openai", "--endpoint", served_model.url, "--rows-per-set", "24",
                      "-k", "not benchmark", "--report-dir", str(tmp_path / "reports"))
    assert result.returncode in (0, 1), result.stdout[-4000:]
    assert len(read_records(tmp_path / "reports")) > 7000


def test_the_stability_study_takes_a_served_model_as_the_target(uninterrupted, tmp_path):
    """A (the embedded model in-process) and B (the same checkpoint served, answers only) on the same rows: the
    study's cross-model tables run, and nothing in them needs B's probabilities."""
    open_model = run_gate("--rows-per-set", "1", "--families", FAMILIES, "-k",
                          "not (invariance or benchmark or snapshot)", "--report-dir", str(tmp_path / "open"))
    assert open_model.returncode in (0, 1), open_model.stdout[-3000:]
    command = [sys.executable, "-m", "laya_robustness", "stability", str(tmp_path / "open" / "predictions.jsonl.gz"),
               str(uninterrupted[2] / "predictions.jsonl.gz"), "--names", "open,served", "--json",
               str(tmp_path / "study.json")]
    study = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert study.returncode == 0, study.stderr[-3000:]
    result = json.loads((tmp_path / "study.json").read_text())
    assert set(result["models"]) == {"open", "served"} and "cross_model" in result
    predictors = [p for cell in result["cross_model"]["datasets"].values() for p in cell["predictors"]]
    served_target = [p for p in predictors if p["source"] == "open" and p["target"] == "served"]
    assert served_target and all(p["n_samples"] > 0 for p in served_target)
    assert all(p["result"] is None or p["result"]["confidence"] is None for p in served_target)
