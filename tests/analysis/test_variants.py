"""The variants command: every check on a scripted generator's texts, the files it writes and how they drive the
rephrase and language families, resuming and refusing, and an end-to-end run of a tiny random causal LM whose noise
must be rejected and counted."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from laya_robustness.__main__ import main
from laya_robustness.analysis.rewriting.checks import check_rephrasing, check_translation
from laya_robustness.analysis.rewriting.command import question_rows, run_variants
from laya_robustness.analysis.rewriting.pipeline import sibling, write_variants
from laya_robustness.analysis.rewriting.prompts import prompt_sha256
from laya_robustness.analysis.rewriting.tasks import Rephrase, Translate
from laya_robustness.families import build_variants
from laya_robustness.families.rephrase import TRANSLATIONS_KEY, USER_KEY
from laya_robustness.loaders.variant_files import read_user_file
from laya_robustness.run.inputs.run_inputs import attach_user_variants
from laya_robustness.rows import Row

from helpers.paths import FIXTURE_ROWS
from helpers.weights import tensors_digest


def row(question="What colour is the square?", options=("red", "blue", "yellow", "green"), label=0,
        primitive="choice", **extra) -> Row:
    return Row(row_id=extra.pop("row_id", "d/0"), dataset="d", group_id="d/0", cluster="d/c0", images=(),
               question=question, options=tuple(options), label=label, primitive=primitive, **extra)


# -- the checks ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("?!", "empty"),
    ("What colour is the sq\ufffdre?", "garbled"), ("What colour\x10 is it?", "garbled"),
    ("what colour is the SQUARE", "copy"),
    ("Which colour does the square have?", "duplicate"),
    ("Is the square red?", "leaks_answer"),
    ("Is the square blue or green?", "leaks_option"),
    ("Tell me the colour of the square", "not_a_question"),
    ("Colour?", "length"),
    ("What is the colour of the square, the shape with four equal sides that is in this image right now?", "length"),
    ("What what what colour colour is is the the square square?", "repetitive"),
    ("What is the colour of the square?", None),
])
def test_each_rephrasing_check(text, reason):
    assert check_rephrasing(text, row(), kept=["Which colour does the square have?"]) == reason


def test_an_option_the_question_itself_names_is_no_leak():
    r = row("Is the circle left of the square?", ("no", "yes"), 1, "noul")
    assert check_rephrasing("Is the circle to the left of the square?", r, []) is None
    assert check_rephrasing("Is the circle left of the square, yes or no?", r, []) == "leaks_answer"
    count = row("How many circles are there?", ("1", "2", "3", "4"), 2)
    assert check_rephrasing("Are there 3 circles?", count, []) == "leaks_answer"
    open_row = row("What is written on the sign?", (), -1, "open", answers=("stop",))
    assert check_rephrasing("Does the sign say stop?", open_row, []) == "leaks_answer"


@pytest.mark.parametrize("language, text, reason", [
    ("fr", "De quelle couleur est le carré ? Répondez en anglais.", None),
    ("fr", "What is the colour of the square? Answer in English.", "english"),
    ("ru", "Какого цвета квадрат? Ответьте на английском.", None),
    ("ru", "De quelle couleur est le carré ?", "wrong_script"),
    ("ja", "四角は何色ですか？英語で答えてください。", None),
    ("zh", "正方形是什么颜色？请用英语回答。", None),
    ("de", "Ist das Quadrat red oder blue? Antworte auf Englisch.", "leaks_answer"),  # the English option text
    ("de", "Ist das Quadrat rot? Antworte auf Englisch.", None),  # a translated option cannot be told
    ("de", "Quadrat Quadrat Quadrat Quadrat Quadrat Quadrat", "repetitive"),
    ("es", "¿Color?", "length"),
    ("es", "What colour is the square?", "copy"),
])
def test_each_translation_check(language, text, reason):
    assert check_translation(text, row(), language, kept=[]) == reason


def test_a_translation_may_say_no_in_its_own_language():
    r = row("Is there no circle?", ("no", "yes"), 0, "noul")
    assert check_translation("¿No hay ningún círculo? Responde en inglés.", r, "es", []) is None


# -- a scripted generator: the files, their format, how they drive the families ----------------------------------------

QUESTION = re.compile(r"Question: (.*)$", re.S)
LANGUAGE = re.compile(r"into (\w[\w ()-]*?)\. Keep")
FRENCH = {"What colour is the square?": "De quelle couleur est le carré ? Répondez en anglais."}


class Scripted:
    """Answers every rephrase prompt with a preamble, two good rephrasings, a copy, a leak and a duplicate, and every
    translate prompt with French for French (when it knows the question) and English otherwise."""

    identity = {"model": "scripted", "weights_sha256": "0" * 64}

    def __init__(self, fail_after: int | None = None):
        self.prompts: list[str] = []
        self.fail_after = fail_after

    def generate(self, prompts, max_new_tokens):
        if self.fail_after is not None and len(self.prompts) + len(prompts) > self.fail_after:
            raise RuntimeError("stopped")
        self.prompts += prompts
        return [self.answer(p) for p in prompts]

    @staticmethod
    def answer(prompt: str) -> str:
        question = QUESTION.search(prompt)[1].strip()
        if prompt.startswith("Translate"):
            language = LANGUAGE.search(prompt)[1]
            return FRENCH.get(question, question) if language == "French" else f"<think>hm</think>{question}"
        body = question.rstrip("?")
        return "\n".join(["Here are the rephrasings:", f"1. Could you tell me: {body}?", f"2) \"{body}, please?\"",
                          f"3. {question}", f"4. {body}: red, blue or yes?", f"5. Could you tell me: {body}?"])


def test_rephrase_writes_the_file_rephrasings_reads_with_its_provenance(tmp_path):
    rows = [row(), row("Is there a red circle?", ("no", "yes"), 1, "noul", row_id="d/1")]
    out = tmp_path / "rephrasings.jsonl"
    stats = write_variants(Rephrase(n=5), Scripted(), rows, out, batch_size=4)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["rephrasings"] for line in lines] == [
        ["Could you tell me: What colour is the square?", "What colour is the square, please?"],
        ["Could you tell me: Is there a red circle?", "Is there a red circle, please?"]]
    provenance = lines[0]["provenance"]
    assert provenance == {"task": "rephrase", "generator": Scripted.identity,
                          "prompt_sha256": prompt_sha256("rephrase"),
                          "settings": {"n": 5, "decoding": "greedy", "batch_size": 4, "max_new_tokens": 512}}
    assert read_user_file(out, USER_KEY) == {("d", "d/0"): lines[0]["rephrasings"],
                                             ("d", "d/1"): lines[1]["rephrasings"]}
    rejects = [json.loads(line) for line in sibling(out, "rejects.jsonl").read_text().splitlines()]
    assert [[r["reason"] for r in line["rejects"]] for line in rejects] == [
        ["not_a_question", "copy", "leaks_answer", "duplicate"]] * 2
    assert rejects[0]["rejects"][0] == {"text": "Here are the rephrasings:", "reason": "not_a_question"}
    assert stats["n_kept"] == 4 and stats["n_rejected"] == 8 and stats["n_rows_with_variants"] == 2
    assert stats["rejected"] == {"copy": 2, "duplicate": 2, "leaks_answer": 2, "not_a_question": 2}
    assert json.loads(sibling(out, "stats.json").read_text()) == stats
    assert not sibling(out, "journal.jsonl").exists()
    # n = 1: once one is kept, the lines after it are not read
    one = write_variants(Rephrase(n=1), Scripted(), rows, tmp_path / "one.jsonl")
    assert one["n_kept"] == 2 and one["rejected"] == {"not_a_question": 2, "extra": 8}


def test_a_user_file_s_provenance_must_be_an_object(tmp_path):
    from laya_robustness.rows import RowError

    path = tmp_path / "r.jsonl"
    path.write_text('{"row_id": "a", "rephrasings": ["x?"], "provenance": {"model": "m"}}\n'
                    '{"row_id": "b", "rephrasings": ["y?"], "provenance": 3}\n')
    with pytest.raises(RowError, match=r"r.jsonl:2: field 'provenance': expected an object, got 3"):
        read_user_file(path, USER_KEY)


def test_the_files_drive_the_rephrase_and_language_families(tmp_path):
    rows = {"colour_choice": [r for r in question_rows(FIXTURE_ROWS, 0, 0) if r.dataset == "colour_choice"][:6]}
    rephrasings, translations = tmp_path / "r.jsonl", tmp_path / "t.jsonl"
    write_variants(Rephrase(n=3), Scripted(), rows["colour_choice"], rephrasings)
    stats = write_variants(Translate(("fr", "de")), Scripted(), rows["colour_choice"], translations)
    square = [r for r in rows["colour_choice"] if r.question == "What colour is the square?"]
    assert stats["n_kept"] == len(square) >= 1 and stats["rejected"] == {"copy": 12 - len(square)}
    attached = attach_user_variants(rows, rephrasings, translations)["colour_choice"]
    user = [v for v in build_variants("rephrase", attached, 0) if v.variant.startswith("user_")]
    assert len(user) == 2 * 6 and user[0].question == f"Could you tell me: {attached[0].question}"
    assert all(v.meta["rephrase"]["source"] == "user" for v in user)
    french = [v for v in build_variants("language", attached, 0)
              if v.variant == "lang_fr" and v.meta["translation"]["source"] == "user"]
    assert len(french) == len(square) and french[0].question == FRENCH["What colour is the square?"]
    assert len(read_user_file(translations, TRANSLATIONS_KEY)) == len(square)


def test_a_stopped_run_resumes_to_the_same_bytes(tmp_path):
    rows = question_rows(FIXTURE_ROWS, 5, 0)
    whole = tmp_path / "whole" / "r.jsonl"
    write_variants(Rephrase(n=2), Scripted(), rows, whole, batch_size=3)
    parts = tmp_path / "parts" / "r.jsonl"
    with pytest.raises(RuntimeError, match="stopped"):
        write_variants(Rephrase(n=2), Scripted(fail_after=10), rows, parts, batch_size=3)
    assert sibling(parts, "journal.jsonl").is_file() and not parts.exists()
    with sibling(parts, "journal.jsonl").open("a") as fh:
        fh.write('{"key": "torn li')  # the last line of a killed run
    again = Scripted()
    write_variants(Rephrase(n=2), again, rows, parts, batch_size=3)
    assert len(again.prompts) == len(rows) - 9  # three whole units of three rows were journaled
    for name in ("r.jsonl", "r.rejects.jsonl", "r.stats.json"):
        assert (parts.parent / name).read_bytes() == (whole.parent / name).read_bytes()
    assert not sibling(parts, "journal.jsonl").exists()
    third = Scripted()
    write_variants(Rephrase(n=2), third, rows, parts, batch_size=3)  # finished: nothing to do
    assert third.prompts == []


def test_another_generator_or_setting_is_refused_for_the_same_file(tmp_path):
    rows = [row()]
    out = tmp_path / "r.jsonl"
    write_variants(Rephrase(n=2), Scripted(), rows, out)
    other = Scripted()
    other.identity = {"model": "other", "weights_sha256": "1" * 64}
    with pytest.raises(ValueError, match="already holds variants of another run"):
        write_variants(Rephrase(n=2), other, rows, out)
    with pytest.raises(ValueError, match="already holds variants of another run"):
        write_variants(Rephrase(n=3), Scripted(), rows, out)


def test_bad_options_are_usage_errors_before_any_model_is_loaded(tmp_path, capsys):
    base = ["variants", "translate", "--model", str(tmp_path / "no-model"), "--data", str(FIXTURE_ROWS)]
    assert main([*base, "--out", str(tmp_path / "t.jsonl"), "--languages", "fr,xx"]) == 4
    assert "--languages: unknown language 'xx'" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "t.jsonl"), "--languages", "fr,fr"]) == 4
    assert "--languages: a language is given twice" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "t.txt")]) == 4
    assert "--out:" in capsys.readouterr().err
    assert main(["variants", "rephrase", "--model", "m", "--data", str(FIXTURE_ROWS), "--out",
                 str(tmp_path / "r.jsonl"), "--n", "0"]) == 4
    assert "--n must be at least 1" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "t.jsonl"), "--max-new-tokens", "0"]) == 4
    assert "--max-new-tokens must be at least 1, got 0" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "t.jsonl")]) == 3  # the model cannot be loaded: the harness
    assert "no-model" in capsys.readouterr().err


# -- a tiny random causal LM, end to end -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from laya_robustness.recipes.tiny_causal_lm import build_causal_lm

    return build_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.mark.parametrize("task, extra", [("rephrase", ["--n", "3"]), ("translate", ["--languages", "fr,ru,ja"])])
def test_a_tiny_random_model_runs_end_to_end_and_its_noise_is_rejected_and_counted(tiny_lm, tmp_path, task, extra,
                                                                                    capsys):
    argv = ["variants", task, "--model", str(tiny_lm), "--data", str(FIXTURE_ROWS), "--rows-per-set", "2",
            "--max-new-tokens", "24", *extra]
    assert main([*argv, "--out", str(tmp_path / "a" / "v.jsonl")]) == 0
    assert "rejected" in capsys.readouterr().out
    stats = json.loads((tmp_path / "a" / "v.stats.json").read_text())
    prompts = 10 if task == "rephrase" else 30  # 5 sets x 2 rows (x 3 languages)
    assert stats["n_rows"] == 10 and stats["n_rejected"] > stats["n_kept"]
    assert stats["n_rejected"] >= 0.9 * prompts  # noise: next to nothing survives
    rejects = [json.loads(line) for line in (tmp_path / "a" / "v.rejects.jsonl").read_text().splitlines()]
    assert sum(len(line["rejects"]) for line in rejects) == stats["n_rejected"] == sum(stats["rejected"].values())
    generator = stats["provenance"]["generator"]
    weights = tensors_digest(tiny_lm)
    assert generator["weights_sha256"] == hashlib.sha256(f"tensors:{weights}\n".encode()).hexdigest()
    assert generator["model"] == str(tiny_lm) and stats["provenance"]["prompt_sha256"] == prompt_sha256(task)
    # the same command again, elsewhere: the same bytes
    assert main([*argv, "--out", str(tmp_path / "b" / "v.jsonl")]) == 0
    for name in ("v.jsonl", "v.rejects.jsonl", "v.stats.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_run_variants_reads_every_dataset_of_the_data(tmp_path):
    assert run_variants("rephrase", model="m", data=FIXTURE_ROWS, out=tmp_path / "r.jsonl", n=1, rows_per_set=1,
                        generator=Scripted()) == 0
    datasets = [json.loads(line)["dataset"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert datasets == sorted(p.stem for p in Path(FIXTURE_ROWS).glob("*.jsonl"))
