"""``python -m laya_robustness stability A B``: the paper's tables for two synthetic models, the JSON equal to
the library's numbers, and usage errors (exit 4) that name the problem."""

from __future__ import annotations

import json

import pytest

from laya_robustness.__main__ import main
from laya_robustness.analysis.study import model_names, parse_modalities
from laya_robustness.metrics.cross_model import cross_model_analysis
from laya_robustness.metrics.stability_analysis import stability_analysis
from laya_robustness.predictions import read_predictions

from helpers.synthetic import MODALITY_OF, write_models

MODALITIES = ",".join(f"{f}={m or 'none'}" for f, m in MODALITY_OF.items())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"), n_groups=60)


def test_two_files_print_every_table_and_write_the_librarys_numbers(files, tmp_path, capsys):
    out = tmp_path / "stability.json"
    assert main(["stability", *map(str, files), "--modalities", MODALITIES, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for heading in ("== model_a: synth_choice (60 samples; visual: pad_crop, shift; phrasing: rephrase; "
                    "language: language) ==", "Stable samples (Fig. 3)", "Answer entropy per sample (Fig. 3)",
                    "(Table 5;", "(Table 7;", "(Table 8;", "I(H_V;H_T|C) / I(H_V;H_T)",
                    "Matthews correlation of visual stability across models (Table 6): synth_choice",
                    "Correctness predictor (Fig. 6)", "recall @ 0.92 precision", "model_a -> model_b",
                    "== model_b: synth_yesno"):
        assert heading in text, heading
    written = json.loads(out.read_text())
    records = {name: read_predictions(path) for name, path in zip(("model_a", "model_b"), files)}
    for name, recs in records.items():
        assert written["models"][name] == json.loads(json.dumps(stability_analysis(recs, MODALITY_OF)))
    assert written["cross_model"] == json.loads(json.dumps(cross_model_analysis(records, MODALITY_OF, seed=0)))


def test_one_file_prints_its_own_tables_only(files, capsys):
    assert main(["stability", str(files[0]), "--modalities", MODALITIES, "--names", "small"]) == 0
    text = capsys.readouterr().out
    assert "== small: synth_open" in text and "Table 6" not in text


def test_usage_errors_name_the_problem(files, tmp_path, capsys):
    assert main(["stability", *map(str, files), "--modalities", "shift=vision"]) == 4
    assert "--modalities: 'shift=vision' is not family=modality" in capsys.readouterr().err
    assert main(["stability", *map(str, files), "--names", "a,a"]) == 4
    assert "--names: need 2 distinct names" in capsys.readouterr().err
    other = write_models(tmp_path, n_groups=59, models=("model_c",))[0]
    assert main(["stability", str(files[0]), str(other), "--modalities", MODALITIES]) == 4
    captured = capsys.readouterr()
    assert "the prediction files do not hold the same rows: model_c lacks 48 row(s) of model_a (e.g. " \
        "synth_choice/0059, synth_choice/0059|language|v0" in captured.err
    assert captured.out == ""  # checked before any table is printed


def test_names_default_to_the_folders_and_modalities_to_the_declarations(tmp_path):
    assert model_names([tmp_path / "a" / "p.gz", tmp_path / "b" / "p.gz"]) == ["a", "b"]
    assert model_names([tmp_path / "a" / "p.gz", tmp_path / "x" / "a" / "p.gz"]) == \
        [str(tmp_path / "a" / "p.gz"), str(tmp_path / "x" / "a" / "p.gz")]
    declared = parse_modalities(None)
    assert declared["image"] is None and declared["shift"] == "visual"
    assert parse_modalities("image=visual,shift=none") == {**declared, "image": "visual", "shift": None}
