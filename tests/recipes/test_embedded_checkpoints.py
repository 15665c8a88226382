"""The two embedded VLM checkpoints: the same recipe with training seeds 1 and 2, and the cross-model
stability analyses run on them (the stability study's Table 6 and Fig. 6 need two models)."""

import json

import pytest

from laya_robustness.__main__ import main
from laya_robustness.families import build_variants
from laya_robustness.predictions import write_predictions
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.scoring.hf import HFVLMScorer

from helpers.paths import ROOT

CHECKPOINTS = {"tiny-smolvlm": 1, "tiny-smolvlm-seed2": 2}


@pytest.mark.parametrize("name, seed", CHECKPOINTS.items())
def test_each_checkpoint_records_its_recipe_and_seed(name, seed):
    record = json.loads((ROOT / "laya_fixtures" / name / "training_record.json").read_text())
    assert record["seed"] == seed
    other = json.loads((ROOT / "laya_fixtures" / "tiny-smolvlm" / "training_record.json").read_text())
    assert {k: v for k, v in record.items() if k not in ("seed", "train_seconds", "final_loss")} == \
        {k: v for k, v in other.items() if k not in ("seed", "train_seconds", "final_loss")}


def test_the_cross_model_tables_run_on_the_two_embedded_checkpoints(fixture_rows, tmp_path, capsys):
    rows = {d: fixture_rows[d][:24] for d in ("colour_choice", "exists_yesno")}
    files = []
    for name in CHECKPOINTS:
        scoring = Scoring(HFVLMScorer.from_pretrained(str(ROOT / "laya_fixtures" / name)))
        records = []
        for dataset_rows in rows.values():
            records += scoring.records(dataset_rows)
            for family in ("shift", "rephrase"):
                records += scoring.records(build_variants(family, dataset_rows, seed=0))
        path = tmp_path / name / "predictions.jsonl.gz"
        path.parent.mkdir()
        write_predictions(path, records)
        files.append(path)
    assert files[0].read_bytes() != files[1].read_bytes()  # two models, not one twice
    assert main(["stability", *map(str, files), "--json", str(tmp_path / "stability.json")]) == 0
    text = capsys.readouterr().out
    assert "Matthews correlation of visual stability across models (Table 6): colour_choice" in text
    assert "tiny-smolvlm -> tiny-smolvlm-seed2" in text
    mcc = json.loads((tmp_path / "stability.json").read_text())["cross_model"]
    assert mcc
