"""The pytest plugin, driven through pytester on a copy of the gate with small rows and a fake scorer."""

import gzip
import json
import platform
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import torch  # noqa: F401  (imported once here: pytester's in-process runs must not re-import it)
# Likewise the dual encoders some tests build (their modules register torch operators on import).
from transformers import CLIPModel, CLIPProcessor, SiglipModel, SiglipProcessor  # noqa: F401
from transformers.models.clip import image_processing_pil_clip  # noqa: F401
from transformers.models.siglip import image_processing_pil_siglip  # noqa: F401

from laya_robustness.recipes.fixture_rows import generate_rows, write_manifest
from laya_robustness.run.pipeline.prefetch import ROWS_THREAD_NAME
from laya_robustness.report.wrapping import unwrap

from helpers.dual import build_dual_encoder
from helpers.gate_project import install_plugin_package, run
from helpers.limits import PASSING_LIMITS
from helpers.paths import ROOT, TESTS

pytest_plugins = ["pytester"]


def test_help_lists_every_option_with_its_default(gate):
    result = gate.runpytest("--help")
    result.stdout.fnmatch_lines(["*robustness gate for vision-language models*"])
    for flag, default in [("--model", "laya_fixtures/tiny-smolvlm"), ("--data", "laya_fixtures/rows"),
                          ("--rows-per-set", "0"), ("--seed", "0"), ("--families", "option_order"),
                          ("--batch-size", "16"), ("--device", "cpu"), ("--precision", "auto"),
                          ("--thresholds", "thresholds.toml"), ("--report-dir", "reports")]:
        text = " ".join(result.stdout.str().split())
        assert f"{flag}=" in text
        assert f"(default: {default}" in text.split(f"{flag}=", 1)[1][:300]


def test_markers_are_registered(gate):
    result = gate.runpytest("--markers")
    for marker in ("gpu", "invariance", "slow", "option_order", "text", "image", "image_shuffle", "text_only",
                   "negation", "inject_image"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}:*"])


def test_gate_passes_writes_reports_and_prints_the_table(gate):
    result = run(gate, "--families", "option_order,image_shuffle", "-rs", "-v")
    # 20 question-family modules (orig included) x 2 sets x gpu: 40 skips; their cpu items: 6 pass (orig and the
    # two selected), 34 skip (17 families not selected); the --baseline comparison, one per default family x
    # (cpu, gpu): 48 skips; the slow rotation sweep x 2 sets x (cpu, gpu): 4; 3 lgip modules x (cpu, gpu): 6
    # (the fake model is no dual encoder and none is given)
    result.assert_outcomes(passed=6, skipped=40 + 34 + 48 + 4 + 6)
    result.stdout.fnmatch_lines(["*robustness gate (cpu)*", "family*dataset*acc*checks",
                                 "orig*colour_choice*ok", "image_shuffle*colour_choice*ok"])
    result.stdout.fnmatch_lines(["*short test summary info*", "SKIPPED*no CUDA device: the gpu tests cannot run here*"])
    result.stdout.fnmatch_lines(["SKIPPED*text is not in --families (option_order,image_shuffle)*"])
    result.stdout.fnmatch_lines(["SKIPPED*the lgip families and test_dual_invariance probe a dual encoder and none "
                                 "is given*"])
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    assert set(summary["families"]) == {"orig", "option_order", "image_shuffle"}
    assert summary["meta"]["model"]["model"] == "fake-model"
    assert (gate.path / "reports" / "predictions.jsonl.gz").stat().st_size > 0


def test_gpu_tests_skip_with_a_reason_naming_cuda_and_the_release_command_does_not_pass_without_one(gate):
    result = run(gate, "-m", "gpu", "-rs", "--families", "option_order")
    # each gpu item: 20 question-family modules x 2 sets, 24 --baseline comparisons, 3 lgip modules, and the slow
    # rotation sweep x 2 sets
    result.assert_outcomes(skipped=40 + 24 + 3 + 2)
    result.stdout.fnmatch_lines(["*no CUDA device: the gpu tests cannot run here*"])
    # nothing was judged: the release gate on a machine without CUDA is a usage error, never a pass
    assert result.ret == 4
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        "NOTHING JUDGED (exit 4, the gate did not pass): no CUDA device: the gpu tests cannot run here "
        "(torch.cuda.is_available() is False): 64 of the 69 checks asked for need one, and nothing was judged; *the "
        "other checks were skipped (3: the lgip families and test_dual_invariance probe a dual encoder and none is "
        "given*; 2: slow*"])
    assert not (gate.path / "reports" / "summary.json").exists()


def test_k_selects_one_family(gate):
    result = run(gate, "-k", "test_option_order and not gpu", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_option_order*colour_choice-cpu*PASSED*"])
    result.stdout.fnmatch_lines(["*test_option_order*exists_yesno-cpu*PASSED*"])


def test_a_crossed_limit_fails_with_a_readable_message(gate):
    (gate.path / "limits.toml").write_text(PASSING_LIMITS.replace("max_flip = 0.9", "max_flip = 0.01"))
    result = run(gate, "--families", "option_order", "-k", "test_option_order and not gpu")
    result.assert_outcomes(failed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*option_order/colour_choice: max_flip FAILED*", "*family:*option_order*",
                                 "*dataset:*colour_choice*", "*limit:*0.01*", "*worst*", "*colour_choice/0*->*"])


def test_known_limitation_is_a_strict_xfail(gate):
    limits = PASSING_LIMITS.replace("min_gap = 0.05", "min_gap = 0.99") + (
        '[[known_limitations]]\nfamily = "image_shuffle"\ndataset = "exists_yesno"\ncheck = "min_gap"\n'
        'reason = "declared in a test"\n')
    (gate.path / "limits.toml").write_text(limits)
    result = run(gate, "--families", "image_shuffle", "-k", "test_image_shuffle and not gpu", "-rxX")
    result.assert_outcomes(failed=1, xfailed=1)  # colour_choice fails the 0.99 gap; exists_yesno is declared
    result.stdout.fnmatch_lines(["*known limitation*declared in a test*"])
    # a limit the declared cell now clears by far (gap 0.29 [0.04, 0.50] against -0.5): a strict XPASS
    (gate.path / "limits.toml").write_text(limits.replace("min_gap = 0.99", "min_gap = -0.5"))
    result = run(gate, "--families", "image_shuffle", "-k", "test_image_shuffle and not gpu")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known limitation no longer holds*"])


@pytest.mark.parametrize("text, key", [
    ("version = 1\n[families.option_ordr]\nmax_flip = 0.1\n", "families.option_ordr"),
    ("version = 1\n[families.option_order]\nmax_flp = 0.1\n", "families.option_order.max_flp"),
    ("version = 1\n[families.option_order.datasets.nope]\nmax_flip = 0.1\n", "nope"),
    ("version = 1\n[families.option_order]\nmax_flip = '0.1'\n", "families.option_order.max_flip"),
])
def test_a_bad_thresholds_file_is_a_usage_error(gate, text, key):
    (gate.path / "limits.toml").write_text(text)
    result = run(gate)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*limits.toml*{key}*"])


def test_a_bad_data_file_is_a_usage_error_naming_file_line_and_field(gate):
    path = gate.path / "rows" / "exists_yesno.jsonl"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace('"label": 0', '"label": 7').replace('"label": 1', '"label": 7')
    path.write_text("\n".join(lines) + "\n")
    result = run(gate)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*exists_yesno.jsonl:4: field 'label'*"])


def test_the_users_rephrasings_and_translations_are_asked(gate):
    """--rephrasings / --translations: each line's strings become variants of that row in the predictions."""
    row_id = json.loads((gate.path / "rows" / "exists_yesno.jsonl").read_text().splitlines()[0])["row_id"]
    (gate.path / "reph.jsonl").write_text(json.dumps({"row_id": row_id, "rephrasings": ["Tell me: is it there?"]}) + "\n")
    (gate.path / "tr.jsonl").write_text(json.dumps({"row_id": row_id, "translations": {"fr": "Est-ce la ?"}}) + "\n")
    result = run(gate, "--families", "rephrase,language", "--rephrasings", "reph.jsonl", "--translations", "tr.jsonl",
                 "-k", "(rephrase or language) and not gpu")
    # the limits set none for either family: their rows are scored and written, and nothing was judged (exit 4)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        "NOTHING JUDGED (exit 4, *): nothing was judged: all 6 checks asked for were skipped*the limits set none for "
        "rephrase*"])
    import gzip

    with gzip.open(gate.path / "reports" / "predictions.jsonl.gz", "rt") as fh:
        records = [json.loads(line) for line in fh]
    mine = [r for r in records if r["group_id"] == row_id]
    assert [r["variant"] for r in mine if r["family"] == "rephrase" and r["variant"].startswith("user_")] == ["user_0"]
    french = [r["meta"]["translation"] for r in mine if r["family"] == "language"
              and r["meta"]["translation"]["language"] == "fr"]
    assert french and french[0]["source"] == "user", french
    others = [r for r in records if r["group_id"] != row_id and r["family"] == "rephrase"]
    assert others and not any(r["variant"].startswith("user_") for r in others)


def test_rephrase_and_language_say_how_to_make_their_file_when_they_have_nothing_to_build(gate):
    """Questions no rule or built-in translation covers: the skip reason names the variants command and option."""
    import dataclasses

    rows = [dataclasses.replace(r, question=f"Name the hue of shape {i}.") for i, r in
            enumerate(generate_rows("colour_choice", 24, seed=5))]
    write_manifest(rows, gate.path / "rows")
    result = run(gate, "--families", "rephrase,language", "-k", "colour_choice and (rephrase or language) and not gpu",
                 "-rs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()  # nothing was judged: a selection of skips
    result.stdout.fnmatch_lines([
        "SKIPPED*rephrase builds no variant of any colour_choice row: no rule applies to its questions and "
        "--rephrasings gives none; write rephrasings with a language model: python -m laya_robustness variants "
        "rephrase --model <chat model> --data <rows> --out rephrasings.jsonl, then pass --rephrasings "
        "rephrasings.jsonl*",
        "SKIPPED*language builds no variant of any colour_choice row: its questions have no built-in translation*"
        "python -m laya_robustness variants translate*--translations translations.jsonl*"], consecutive=False)


def test_a_bad_rephrasings_file_is_a_usage_error_naming_file_line_and_field(gate):
    (gate.path / "reph.jsonl").write_text('{"row_id": "x", "rephrasings": ["ok"]}\n{"row_id": "y", "rephrasings": 3}\n')
    result = run(gate, "--families", "rephrase", "--rephrasings", "reph.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rephrasings*reph.jsonl:2: field 'rephrasings'*"])


def test_a_model_that_cannot_load_is_a_harness_error_not_a_gate_failure(gate):
    result = run(gate, "--scorer", "helpers.fakes:broken", "-k", "test_option_order and not gpu")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["*harness error (not a gate failure)*no checkpoint at fake-model*"])


@pytest.mark.parametrize("args, words", [
    (("--seed", "abc"), "--seed: 'abc' is not an integer"),
    (("--rows-per-set", "-1"), "--rows-per-set: -1 is below 0"),
    (("--batch-size", "0"), "--batch-size: 0 is below 1"),
    (("--temperatures", "choice=0"), "--temperatures: the temperature of choice must be a finite number > 0"),
    (("--temperatures", "choise=2"), "--temperatures: unknown primitive 'choise'"),
    (("--families", "optoin_order"), "--families: unknown family 'optoin_order'; did you mean option_order?"),
    (("--device", "gpu0"), "--device: 'gpu0' is not cpu, cuda, cuda:<n> or mps"),
    (("--scoring-path", "fast"), "--scoring-path: 'fast' is not one of batch, predict"),
    (("--scorer", "not a plugin"), "--scorer: 'not a plugin' is neither 'hf', 'openai' nor 'module:function'"),
    (("--scorer", "openai"), "--endpoint: --scorer openai needs the server's base URL"),
    (("--endpoint", "ftp://127.0.0.1/v1"), "--endpoint: 'ftp://127.0.0.1/v1' is not an http(s)://host"),
    (("--endpoint", "http://user:secret@127.0.0.1:8000/v1"), "--endpoint: the URL holds credentials"),
    (("--api-key-env", "my key"), "--api-key-env: 'my key' is not the name of an environment variable"),
    (("--concurrency", "0"), "--concurrency: 0 is below 1"),
    (("--request-timeout", "0"), "--request-timeout: 0 is not a number of seconds > 0"),
])
def test_a_bad_option_is_a_usage_error_naming_it(gate, args, words):
    result = run(gate, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{words}*", f"*type instead, e.g.: pytest robustness_tests {args[0]} *"])


def test_a_crash_while_scoring_is_a_harness_error_naming_the_rows_and_model(gate):
    result = run(gate, "--scorer", "helpers.fakes:crashing", "--families", "option_order",
                 "-k", "option_order and not gpu")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["*harness error (not a gate failure)*scoring orig/colour_choice on cpu with model "
                                 "'fake-model' failed: IndexError: tuple index out of range*"])
    result.stdout.fnmatch_lines(["*HARNESS ERROR*"])
    assert "max_flip FAILED" not in result.stdout.str()


THROWAWAY_FAMILY = """
from laya_robustness.families import Family, declare


def build(rows, seed):
    return [row.derive("grayscale", "gray", images=tuple(i.convert("L").convert("RGB") for i in row.images))
            for row in rows if row.images]


declare(Family(name="grayscale", build=build, summary="the image in grayscale", variants=("gray",),
               checks=("max_flip", "max_drop"), title="grayscale", short="gray"))
"""
def test_a_family_declared_in_one_module_runs_end_to_end(gate):
    """Declared in a module of its own, the family gets its gate test from the registry: no test module to write."""
    (gate.path / "throwaway_family.py").write_text(THROWAWAY_FAMILY)
    (gate.path / "limits.toml").write_text(PASSING_LIMITS + "[families.grayscale]\nmax_flip = 0.9\n")
    result = run(gate, "-p", "throwaway_family", "--families", "grayscale", "-k", "grayscale and not gpu",
                 "--markers", subprocess=True)
    result.stdout.fnmatch_lines(["@pytest.mark.grayscale: the grayscale family (the image in grayscale)*"])
    result = run(gate, "-p", "throwaway_family", "--families", "grayscale", "-k", "grayscale and not gpu",
                 "--benchmark-enable", subprocess=True)
    # its gate test on both sets and the benchmark of its builder (asked for: the rows are the test's own) pass;
    # its --baseline comparison skips (none given)
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*test_variant_build_time[[]grayscale[]]*"])
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    cell = summary["families"]["grayscale"]["colour_choice"]
    assert set(cell["variants"]) == {"gray"} and cell["flip"] is not None
    (gate.path / "limits.toml").write_text(PASSING_LIMITS + "[families.grayscale]\nmax_asr = 0.9\n")
    result = run(gate, "-p", "throwaway_family", "--families", "grayscale", subprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*check 'max_asr' does not apply to family 'grayscale'*"])


def test_a_family_from_an_installed_package_is_scored_gated_and_reported(gate, monkeypatch):
    site = gate.path / "site"
    site.mkdir()
    install_plugin_package(site, "grayscale_plugin", THROWAWAY_FAMILY)
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{site}")
    (gate.path / "limits.toml").write_text(PASSING_LIMITS + "[families.grayscale]\nmax_flip = 0.9\n")
    args = ("--families", "option_order,grayscale", "-k", "not gpu")
    result = run(gate, *args, "--co", "-q", subprocess=True)
    result.stdout.fnmatch_lines(["*test_families.py::test_grayscale[[]colour_choice-cpu[]]",
                                 "*test_families.py::test_grayscale[[]exists_yesno-cpu[]]"])
    result = run(gate, *args, "-v", subprocess=True)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*grayscale*colour_choice*ok*"])  # a row of the terminal table (-v)
    assert "grayscale" in (gate.path / "reports" / "report.html").read_text()
    assert "grayscale" in (gate.path / "reports" / "summary.md").read_text()
    checks = json.loads((gate.path / "reports" / "checks.json").read_text())["results"]
    assert {(r["family"], r["check"]) for r in checks if r["family"] == "grayscale"} == {("grayscale", "max_flip")}
    # a crossed limit of the plug-in family fails the run (exit 1), naming it
    (gate.path / "limits.toml").write_text(PASSING_LIMITS + "[families.grayscale]\nmax_flip = 0.0\n"
                                           "[gate]\njudge = \"point\"\n")
    result = run(gate, *args, subprocess=True)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*FAILED*test_grayscale[[]colour_choice-cpu[]]*"])


def test_the_gate_runs_on_a_vlmevalkit_tsv_with_the_shipped_limits(gate):
    import base64
    import io

    rows = generate_rows("colour_choice", 12, seed=7)
    lines = ["index\timage\tquestion\thint\tA\tB\tC\tD\tanswer\tcategory"]
    for i, r in enumerate(rows):
        buffer = io.BytesIO()
        r.images[0].save(buffer, format="PNG")
        cells = [str(i), base64.b64encode(buffer.getvalue()).decode(), r.question, "", *r.options,
                 "ABCD"[r.label], "colour"]
        lines.append("\t".join(cells))
    (gate.path / "my_photos.tsv").write_text("\n".join(lines) + "\n")
    shutil.copy(ROOT / "thresholds.toml", gate.path / "thresholds.toml")
    result = run(gate, "--data", "my_photos.tsv", "--thresholds", "thresholds.toml", "-k", "not gpu", "-rs")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    assert summary["families"]["orig"]["my_photos"]["n_rows"] == 12
    result.stdout.fnmatch_lines(["*no snapshot yet for this configuration "
                                 "(fake-model.cpu.my_photos_tsv.s0.n0.all.helpers_fakes_oracle)*"
                                 "--snapshot-update*"])


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_a_dual_encoder_model_is_probed_not_asked(gate, tmp_path, kind):
    model = build_dual_encoder(kind, tmp_path / kind)
    shutil.copy(ROOT / "thresholds.toml", gate.path / "thresholds.toml")
    result = run(gate, "--scorer", "hf", "--model", str(model), "--captions", str(ROOT / "laya_fixtures" / "captions"),
                 "--thresholds", "thresholds.toml", "-k", "(lgip or invariance or option_order) and not gpu", "-rs",
                 subprocess=True)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 3 + 6  # three lgip families, six conditions
    result.stdout.fnmatch_lines(["*is a dual encoder: it answers no questions, so option_order does not apply*"])
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    assert set(summary["lgip"]) == {"lgip_paraphrase", "lgip_flip", "lgip_combined"}
    assert summary["meta"]["model"]["dual"]["kind"] == kind
    # against its own predictions: every lgip family is compared, and nothing regressed
    shutil.copy(gate.path / "reports" / "predictions.jsonl.gz", tmp_path / "baseline.jsonl.gz")
    again = run(gate, "--scorer", "hf", "--model", str(model), "--captions", str(ROOT / "laya_fixtures" / "captions"),
                "--thresholds", "thresholds.toml", "--baseline", str(tmp_path / "baseline.jsonl.gz"),
                "-k", "test_no_regression and lgip and not gpu", "-rs", subprocess=True)
    again.assert_outcomes(skipped=3)  # compared, and skipped for what they are: captions have no accuracy
    again.stdout.fnmatch_lines(["SKIPPED*no lgip_* row has a right answer (a caption has none)*"])
    # the regression tests alone judge no cell: that run's report is the incomplete twin of the complete one
    compared = json.loads((gate.path / "reports" / "summary.incomplete.json").read_text())
    assert compared["meta"]["scope"]["judged"] == {} and compared["meta"]["complete"] is False
    assert {f: c["all"]["acc_diff"] for f, c in compared["baseline"].items()} == \
        {"orig": None, "lgip_paraphrase": None, "lgip_flip": None, "lgip_combined": None}


def test_baseline_against_its_own_predictions_passes_and_a_better_baseline_fails(gate, tmp_path):
    """--baseline: the same run again loses nothing (0 changed answers); against a baseline that answered every
    option_order row right (so it flipped less as well), the family's paired loss is past max_regression, its
    flip-rate rise past max_flip_regression, and the test fails with both McNemar tests."""
    import gzip

    first = run(gate, "--families", "option_order", "-k", "(test_orig or test_option_order) and not gpu")
    assert first.ret == 0, first.stdout.str()
    own = tmp_path / "own.jsonl.gz"
    shutil.copy(gate.path / "reports" / "predictions.jsonl.gz", own)
    (gate.path / "limits.toml").write_text(PASSING_LIMITS + "[gate]\nmax_regression = 0.02\n")
    same = run(gate, "--families", "option_order", "--baseline", str(own), "-k", "test_no_regression and not gpu", "-v")
    same.stdout.fnmatch_lines(["*test_no_regression*cpu-orig*PASSED*", "*test_no_regression*cpu-option_order*PASSED*"])
    # the regression tests judge no cell: the report is the incomplete twin of the first run's complete one
    compared = json.loads((gate.path / "reports" / "summary.incomplete.json").read_text())
    baseline = compared["baseline"]["option_order"]["all"]
    assert baseline["acc_diff"] == 0 and baseline["mcnemar_acc"]["b"] == baseline["mcnemar_acc"]["c"] == 0
    with gzip.open(own, "rt") as fh:
        records = [json.loads(line) for line in fh]
    better = tmp_path / "better.jsonl.gz"
    with gzip.open(better, "wt") as fh:
        for r in records:
            fh.write(json.dumps({**r, "argmax": r["label"]} if r["family"] == "option_order" else r) + "\n")
    worse = run(gate, "--families", "option_order", "--baseline", str(better), "-k", "test_no_regression and not gpu")
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    worse.stdout.fnmatch_lines(["*option_order/all: max_regression FAILED*", "*McNemar on accuracy:*",
                                "*option_order/all: max_flip_regression FAILED*", "*McNemar on flips:*"])


def test_the_gate_runs_on_a_parquet_file_with_an_image_column(gate):
    from laya_robustness.loaders.export import export_parquet

    (written,) = [p for p in export_parquet(gate.path / "rows", gate.path / "parquet") if p.stem == "colour_choice"]
    shutil.copy(ROOT / "thresholds.toml", gate.path / "thresholds.toml")
    result = run(gate, "--data", str(written), "--thresholds", "thresholds.toml", "--families", "option_order",
                 "-k", "(orig or option_order) and not gpu")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    summary = json.loads((gate.path / "reports" / "summary.json").read_text())
    cell = summary["families"]["option_order"]["colour_choice"]
    assert summary["families"]["orig"]["colour_choice"]["n_rows"] == 24 and cell["circular_acc"] is not None


def test_xdist_merge_equals_a_single_process_run(gate):
    single = run(gate, "--report-dir", "single", subprocess=True)
    assert single.ret == 0, single.stdout.str()
    split = run(gate, "-n", "2", "--report-dir", "split", subprocess=True)
    assert split.ret == 0, split.stdout.str()
    one = (gate.path / "single" / "summary.json").read_text()
    two = (gate.path / "split" / "summary.json").read_text()
    assert json.loads(one)["families"] and one == two
    assert (gate.path / "single" / "predictions.jsonl.gz").read_bytes() == \
        (gate.path / "split" / "predictions.jsonl.gz").read_bytes()


def _rows_scored(path: Path) -> int:
    return sum(int(n) for n in path.read_text().split())


def test_xdist_scores_every_row_once(gate, monkeypatch):
    """-n 2 keeps a dataset's tests on one worker (--dist loadgroup by default): no orig row is scored by two
    workers, so the workers together score exactly the rows one process scores."""
    monkeypatch.setenv("LAYA_COUNT_FILE", str(gate.path / "single.count"))
    assert run(gate, "--scorer", "helpers.fakes:counting", "--report-dir", "single", subprocess=True).ret == 0
    monkeypatch.setenv("LAYA_COUNT_FILE", str(gate.path / "split.count"))
    split = run(gate, "--scorer", "helpers.fakes:counting", "--report-dir", "split", "-n", "2", "-v", subprocess=True)
    assert split.ret == 0, split.stdout.str()
    split.stdout.fnmatch_lines(["scheduling tests via DatasetScheduling"])
    workers = defaultdict(set)  # dataset -> the workers that ran one of its tests
    for worker, dataset in re.findall(r"^\[(gw\d+)\] .*::test_\w+\[(colour_choice|exists_yesno)-(?:cpu|gpu)\]",
                                      split.stdout.str(), re.M):
        workers[dataset].add(worker)
    assert set(workers) == {"colour_choice", "exists_yesno"} and all(len(w) == 1 for w in workers.values()), workers
    assert _rows_scored(gate.path / "split.count") == _rows_scored(gate.path / "single.count") > 0
    one = (gate.path / "single" / "summary.json").read_text()
    assert json.loads(one)["families"] and one == (gate.path / "split" / "summary.json").read_text()


@pytest.mark.parametrize("dist", [[], ["--dist", "loadfile"]], ids=["whole-datasets", "dist-given"])
def test_under_xdist_a_worker_given_whole_datasets_scores_their_cells_as_one_stream(gate, monkeypatch, dist):
    """-n alone gives each worker whole datasets: at a dataset's first test the worker plans its cells and scores
    them as one stream, the next cell's rows built on a thread of their own while a cell is scored (that thread is
    alive at scoring calls). Under a --dist the user chose, a worker does not know its cells ahead: no stream."""
    monkeypatch.setenv("LAYA_COUNT_FILE", str(gate.path / "split.count"))
    monkeypatch.setenv("LAYA_THREADS_FILE", str(gate.path / "split.threads"))
    split = run(gate, "--scorer", "helpers.fakes:counting", "--report-dir", "split", "-n", "2", *dist,
                subprocess=True)
    assert split.ret == 0, split.stdout.str()
    calls = [line.split() for line in (gate.path / "split.threads").read_text().splitlines()]
    scored = {call[0] for call in calls}
    streamed = {call[0] for call in calls if ROWS_THREAD_NAME in call[1:]}
    assert scored and scored <= {"gw0", "gw1"} and streamed == (scored if not dist else set()), calls


def test_under_xdist_the_snapshot_is_compared_on_the_controller(gate):
    """A worker has only its share of the records: the snapshot is compared once on the controller, over the
    merged records; a difference is printed as a diff, fails the run and counts as the snapshot test's failure."""
    base = ("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml")
    recorded = gate.runpytest_subprocess(*base, "-k", "snapshot and not gpu", "--snapshot-update")
    assert recorded.ret == 0, recorded.stdout.str()
    (stored,) = (gate.path / "robustness_tests" / "__snapshots__").rglob("*.json")
    run_all = (*base, "-k", "not (benchmark or invariance or gpu)", "-n", "2", "-rs")
    same = gate.runpytest_subprocess(*run_all)
    assert same.ret == 0, same.stdout.str()
    same.stdout.fnmatch_lines(["summary snapshot (cpu): matches *.cpu.*(compared on the controller)",
                               "SKIPPED*under xdist the summary snapshot is compared once, on the controller*"])
    text = stored.read_text()
    acc = json.loads(text)["headlines"]["orig/colour_choice"].split()[1]  # "acc 0.875 [0.750, 1.000]"
    moved = f"{float(acc) + 0.125:.3f}"
    stored.write_text(text.replace(f'"orig/colour_choice": "acc {acc}', f'"orig/colour_choice": "acc {moved}', 1))
    changed = gate.runpytest_subprocess(*run_all)
    assert changed.ret == pytest.ExitCode.TESTS_FAILED, changed.stdout.str()
    changed.stdout.fnmatch_lines(["*summary snapshot (cpu) DIFFERS from*", f'-*"orig/colour_choice": "acc {moved} *',
                                  f'+*"orig/colour_choice": "acc {acc} *'])
    # the command to accept it is the run's own (its options name the snapshot), without xdist
    changed.stdout.fnmatch_lines(["review the change; accept it with `pytest *robustness_tests --import-mode=importlib "
                                  "--thresholds limits.toml -k 'not (benchmark or invariance or gpu)' -rs "
                                  "--snapshot-update -n 0`"])
    # the worker skipped its snapshot test to have it compared here: it is counted as the failure it is
    assert changed.parseoutcomes()["failed"] == 1 and same.parseoutcomes()["skipped"] == \
        changed.parseoutcomes()["skipped"] + 1, changed.stdout.lines[-1]
    changed.stdout.fnmatch_lines(["*= FAILURES =*", "*robustness_tests/test_summary_snapshot.py::test_summary_snapshot"
                                  "[[]cpu[]]*", "summary snapshot (cpu) differs from *: see the terminal summary"])


def test_each_scoring_configuration_keeps_its_own_snapshot(gate):
    """The predict path's logits differ from the batch path's in the last digits: it is not compared with the
    batch path's snapshot (which would fail, and --snapshot-update would flip it back and forth), but skips
    until its own is recorded; then both are kept and each matches."""
    base = ("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml", "-k", "snapshot and not gpu")
    assert gate.runpytest_subprocess(*base, "--snapshot-update").ret == 0
    predict = gate.runpytest_subprocess(*base, "--scoring-path", "predict", "-rs")
    # the snapshot alone was asked for and there is none of this configuration yet: nothing was judged (exit 4)
    assert predict.ret == pytest.ExitCode.USAGE_ERROR, predict.stdout.str()
    predict.stdout.fnmatch_lines(["*no snapshot yet for this configuration "
                                  "(fake-model.cpu.rows.s0.n0.all.helpers_fakes_oracle-predict)*"])
    assert gate.runpytest_subprocess(*base, "--scoring-path", "predict", "--snapshot-update").ret == 0
    stored = sorted(p.name for p in (gate.path / "robustness_tests" / "__snapshots__").rglob("*.json"))
    assert [name.endswith(".all.helpers_fakes_oracle-predict].json") for name in stored] == [True, False], stored
    for extra in ((), ("--scoring-path", "predict")):
        again = gate.runpytest_subprocess(*base, *extra)
        again.assert_outcomes(passed=1)


COMMITTED_SNAPSHOTS = ROOT / "robustness_tests" / "__snapshots__"
SYRUPY_UNUSED = ("unused", "Deleted", "delete unused snapshots")


def _with_committed_snapshots(gate) -> dict[Path, bytes]:
    """The project's committed snapshots (the embedded default's: another configuration here) copied into the gate's
    copy, by path with their bytes."""
    shutil.copytree(COMMITTED_SNAPSHOTS, gate.path / "robustness_tests" / "__snapshots__")
    return {p: p.read_bytes() for p in (gate.path / "robustness_tests" / "__snapshots__").rglob("*.json")}


def test_a_snapshot_update_writes_its_own_configuration_and_keeps_every_other(gate):
    """The issue's case: another configuration's committed snapshot was deleted as "unused" by an update with other
    options (and a plain run with it beside its own failed, syrupy counting it unused). Whatever the options (rows
    per set, families, --data, -k), an update writes its own configuration's file and leaves every other
    byte-identical, and syrupy says nothing of unused snapshots."""
    committed = _with_committed_snapshots(gate)
    base = ("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml", "--benchmark-skip", "-rs")
    issue = ("--families", "option_order", "--rows-per-set", "2")  # the issue's options
    for options in (issue, ("--data", "rows/colour_choice.jsonl", "-k", "snapshot or option_order")):
        updated = gate.runpytest_subprocess(*base, *options, "--snapshot-update", "-n", "0")
        assert updated.ret == 0, updated.stdout.str()
        assert {p: p.read_bytes() for p in committed if p.exists()} == committed, options  # there, byte-identical
        assert not any(word in updated.stdout.str() for word in SYRUPY_UNUSED), updated.stdout.str()
    own = {p.name for p in (gate.path / "robustness_tests" / "__snapshots__").rglob("*.json")} - \
        {p.name for p in committed}
    assert own == {"test_summary_snapshot[cpu][fake-model.cpu.rows.s0.n2.option_order.helpers_fakes_oracle].json",
                   "test_summary_snapshot[cpu]"
                   "[fake-model.cpu.rows_colour_choice_jsonl.s0.n0.all.helpers_fakes_oracle].json"}
    again = gate.runpytest_subprocess(*base, *issue)
    assert again.ret == 0, again.stdout.str()  # its own matches; the others are no "unused" failure
    again.stdout.fnmatch_lines(["*1 snapshot passed.*"])
    assert not any(word in again.stdout.str() for word in SYRUPY_UNUSED), again.stdout.str()
    # a configuration without a snapshot: the advice records it with the run's own options and -n 0, as the docs do
    skipped = gate.runpytest_subprocess(*base, "--rows-per-set", "3", "-k", "snapshot")
    pytest.LineMatcher(unwrap(skipped.stdout.lines)).fnmatch_lines([
        "SKIPPED*no snapshot yet for this configuration (fake-model.cpu.rows.s0.n3.all.helpers_fakes_oracle)*"
        "Record one with "
        "`pytest *robustness_tests --import-mode=importlib --thresholds limits.toml --benchmark-skip -rs "
        "--rows-per-set 3 -k snapshot --snapshot-update -n 0`*"])


@pytest.mark.parametrize("update", [(), ("--snapshot-update", "-n", "0")])
def test_a_usage_error_leaves_every_snapshot_and_no_syrupy_advice(gate, update):
    """Bad rows end the run at collection (exit 4). syrupy, its hooks called before the gate's (``-p
    laya_robustness`` loads the gate's plugin first, as an editable install in the project root does), used to
    count every committed snapshot unused, advise deleting it and, under --snapshot-update, delete it."""
    committed = _with_committed_snapshots(gate)
    (gate.path / "bad.jsonl").write_text('{"row_id": "a", "question": "q?", "options": ["x", "y"], "answer": 0}\n')
    result = gate.runpytest_subprocess("robustness_tests", "-p", "laya_robustness", "--import-mode=importlib",
                                       "--thresholds", "limits.toml", "--data", "bad.jsonl", *update)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert {p: p.read_bytes() for p in committed if p.exists()} == committed
    assert not any(word in result.stdout.str() for word in SYRUPY_UNUSED), result.stdout.str()


@pytest.mark.parametrize(("value", "header"), [
    ("yes", "laya-robustness: malloc keeps freed memory for reuse, given back as images are let go (--keep-freed-memory yes)"),
    ("no", "laya-robustness: malloc left as it is (--keep-freed-memory no)"),
])
def test_the_header_says_whether_malloc_keeps_freed_memory(gate, value, header):
    if value == "yes" and platform.libc_ver()[0] != "glibc":
        pytest.skip("the setting is glibc's")
    result = gate.runpytest_subprocess("robustness_tests", "--import-mode=importlib", "--co",
                                       "--keep-freed-memory", value)
    result.stdout.fnmatch_lines([header])


def test_a_bad_keep_freed_memory_value_is_a_usage_error(gate):
    result = gate.runpytest_subprocess("robustness_tests", "--keep-freed-memory", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--keep-freed-memory: 'sometimes' is not yes or no*"])


def test_snapshot_update_is_refused_under_xdist(gate):
    result = gate.runpytest_subprocess("robustness_tests", "-n", "2", "--snapshot-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--snapshot-update cannot run under xdist*"])


INVARIANCE_LIMITS = """
version = 1
[invariance.batched]
max_abs_dp = 1e-5
max_abs_dlogit = 1e-4
max_flips = 0
[invariance.repeat_batch]
bitwise = true
"""


def test_a_batch_dependent_scorer_fails_invariance_naming_the_row(gate):
    (gate.path / "limits.toml").write_text(INVARIANCE_LIMITS)
    args = ("-m", "invariance and not gpu", "-k", "batched or repeat_batch", "--invariance-rows", "3")
    result = run(gate, *args)
    # batched, repeat_batch; batched_reversed has no limit; the three dual conditions have no dual encoder
    result.assert_outcomes(passed=2, skipped=4)
    result = run(gate, "--scorer", "helpers.fakes:neighbour_dependent", *args)
    result.assert_outcomes(failed=1, passed=1, skipped=4)
    result.stdout.fnmatch_lines(["*invariance/batched: max_abs_dlogit FAILED*", "*colour_choice/0000*: answer*"])
    report = json.loads((gate.path / "reports" / "invariance.json").read_text())
    assert report["conditions"]["batched"]["max_abs_dlogit"] > 1e-4
    assert report["meta"]["precision"]["batched"] == "fp32" and report["meta"]["seed"] == 0


def test_offline_summary_equals_the_online_one(gate):
    from laya_robustness.report.offline import summarize_file as run_cli

    result = run(gate, "--families", "option_order,text,image_shuffle,text_only")
    assert result.ret == 0, result.stdout.str()
    online = json.loads((gate.path / "reports" / "summary.json").read_text())
    assert run_cli(gate.path / "reports" / "predictions.jsonl.gz", gate.path / "offline.json") == 0
    offline = json.loads((gate.path / "offline.json").read_text())
    assert set(online["families"]) == {"orig", "option_order", "text", "image_shuffle", "text_only"}
    assert offline["families"] == online["families"] and offline["meta"] == online["meta"]


def test_the_cache_bounds_reach_the_hf_scorer(gate):
    gate.makepyfile(test_bounds="""
def test_bounds(robustness):
    scorer = robustness.scorer("cpu")
    assert scorer._feature_store.max_bytes == 3 << 20 and scorer._pixels.max_bytes == 5 << 20
    assert scorer._prefixes.max_bytes == 7 << 20
""")
    result = gate.runpytest("test_bounds.py", "--thresholds", "limits.toml", "--scorer", "hf",
                            "--model", str(ROOT / "laya_fixtures" / "tiny-smolvlm"),
                            "--feature-cache-mb", "3", "--pixel-cache-mb", "5", "--prefix-cache-mb", "7")
    result.assert_outcomes(passed=1)


def test_the_header_and_summary_say_how_prompt_prefixes_are_shared_and_what_it_saved(gate):
    model = str(ROOT / "laya_fixtures" / "tiny-smolvlm")
    result = gate.runpytest("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml",
                            "--scorer", "hf", "--model", model, "--families", "option_order",
                            "-k", "option_order and cpu and not baseline")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    result.stdout.fnmatch_lines(["laya-robustness: prompt prefix sharing (idefics3): kv-cache: the prompt through "
                                 "its last image token runs once per image*"])
    (line,) = [x for x in unwrap(result.stdout.lines) if x.startswith("language model (cpu): ")]
    computed, rows, alone = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:tokens|rows;|had)", line))
    assert rows > 48 and 0 < computed < alone, line  # the orig rows and their option_order variants
    off = gate.runpytest("robustness_tests", "--import-mode=importlib", "--co", "--scorer", "hf", "--model", model,
                         "--prefix-cache-mb", "0")
    off.stdout.fnmatch_lines(["laya-robustness: prompt prefix sharing (idefics3): none: --prefix-cache-mb 0"])


def test_the_header_names_the_prefix_lm_that_shares_no_prefix(tmp_path):
    from types import SimpleNamespace

    from laya_robustness.pytest_plugin.terminal import prefix_sharing_line

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "paligemma"}))
    settings = SimpleNamespace(scorer="hf", model=str(tmp_path), prefix_cache_mb=1024)
    assert prefix_sharing_line(settings).startswith("laya-robustness: prompt prefix sharing (paligemma): none: the "
                                                    "prompt attends bidirectionally (a prefix-LM)")
    given = SimpleNamespace(scorer="helpers.fakes:oracle", model=str(tmp_path), prefix_cache_mb=1)
    assert prefix_sharing_line(given) is None


@pytest.mark.parametrize("content, words", [
    (b"", "--baseline: "),
    (None, "--baseline: "),
    (b"not gzip at all", "--baseline: "),
    (gzip.compress(b'{"row_id": "a"}\n', mtime=0), "--baseline: "),
], ids=["empty", "missing", "not-gzip", "foreign"])
def test_a_bad_baseline_is_a_usage_error_before_any_row_is_scored(gate, tmp_path, monkeypatch, content, words):
    """Checked with the other inputs, before collection ends: exit 4 naming it, nothing scored, no report."""
    bad = tmp_path / "baseline.jsonl.gz"
    if content is not None:
        bad.write_bytes(content)
    counts = tmp_path / "rows.count"
    monkeypatch.setenv("LAYA_COUNT_FILE", str(counts))  # the counting scorer appends each batch's rows to it
    result = run(gate, "--families", "option_order", "--scorer", "helpers.fakes:counting", "--baseline", str(bad),
                 subprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{words}*{bad.name}*"])
    assert not (gate.path / "reports" / "summary.json").exists() and not counts.exists()


def test_a_journal_inside_the_data_folder_is_a_usage_error(gate):
    result = run(gate, "--journal", "rows/journal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--journal: *rows/journal is inside --data *rows: --resume would read its files as "
                                 "rows*", "*type instead, e.g.: pytest robustness_tests --journal reports/journal*"])


def test_the_terminal_ends_on_the_verdict_after_every_other_plugins_summary(gate, monkeypatch):
    # a plugin registered before the gate's (``-p``: as syrupy and pytest-benchmark are) writes its own summary
    monkeypatch.syspath_prepend(str(gate.path))
    (gate.path / "other_summary.py").write_text(
        "def pytest_terminal_summary(terminalreporter):\n"
        "    terminalreporter.write_line('ANOTHER PLUGIN SUMMARY')\n")
    result = run(gate, "--families", "option_order", "-p", "other_summary")
    lines = result.stdout.lines
    other = lines.index("ANOTHER PLUGIN SUMMARY")
    verdict = next(i for i, line in enumerate(lines) if "robustness gate (cpu): verdict" in line)
    assert other < verdict, "\n".join(lines[-30:])
    assert lines[-1].lstrip("= ").split()[0].isdigit()  # pytest's own count line closes, right after the verdict
