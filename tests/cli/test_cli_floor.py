"""The CLI's ECE noise floor: ``floor PREDICTIONS`` and ``summarize --ece-floor-sims N``, on a written file."""

from __future__ import annotations

import json

import pytest

from laya_robustness.__main__ import main
from laya_robustness.metrics.floor import floor_block
from laya_robustness.predictions import write_predictions
from laya_robustness.rng import keyed_rng
from laya_robustness.summary import summarize
from laya_robustness.report.tables import format_floor_table

from helpers.records import record

DATASETS = ("mapqa", "vsr")
N_GROUPS = 30


def _record(dataset: str, i: int, family: str, variant: str, rng) -> dict:
    """A noul record of group i (3 questions per image cluster); overconfident: p_max in [0.8, 1), right 60%."""
    group = f"{dataset}/{i:03d}"
    p_max = float(rng.uniform(0.8, 1.0))
    argmax = int(rng.random() < 0.5)
    label = argmax if rng.random() < 0.6 else 1 - argmax
    probs = [round(1 - p_max, 5), round(p_max, 5)] if argmax else [round(p_max, 5), round(1 - p_max, 5)]
    return record(group, family, variant, cluster=f"{dataset}/img{i // 3}", dataset=dataset, primitive="noul",
                  label=label, logits=[0.0, 1.0] if argmax else [1.0, 0.0], probs=probs, argmax=argmax, meta={})


def records() -> list[dict]:
    """orig and text rows of two datasets, plus inject_text rows (an extension family: no floor)."""
    out = []
    for dataset in DATASETS:
        rng = keyed_rng(0, "test_cli_floor", dataset)
        for i in range(N_GROUPS):
            out.append(_record(dataset, i, "orig", "orig", rng))
            out.append(_record(dataset, i, "text", "a", rng))
            out.append(dict(_record(dataset, i, "inject_text", "blunt", rng), meta={"target": i % 2}))
    return out


@pytest.fixture()
def predictions(tmp_path):
    path = tmp_path / "predictions.jsonl.gz"
    write_predictions(path, records())
    return path


def _core() -> list[dict]:
    return [r for r in records() if r["family"] != "inject_text"]


def test_floor_subcommand_prints_the_table(predictions, capsys):
    assert main(["floor", str(predictions), "--sims", "50"]) == 0
    out = capsys.readouterr().out
    expected = floor_block(_core(), sims=50, seed=0)
    assert sorted(expected) == ["orig", "text"] and all(sorted(c) == list(DATASETS) for c in expected.values())
    assert out == format_floor_table({"floor": expected}) + "\n"
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["dataset", "family", "ECE"]
    assert [line.split()[:2] for line in lines[1:5]] == [["mapqa", "orig"], ["mapqa", "text"],
                                                           ["vsr", "orig"], ["vsr", "text"]]
    assert "inject_text" not in out
    c = expected["orig"]["vsr"]
    assert c["ece"] > 0.1 and c["floor_mean"] > 0  # overconfident by construction: a real ECE, a real floor
    assert lines[3].split()[3:] == [f"{c['floor_mean']:.3f}", f"{c['floor_p95']:.3f}", f"{c['clustered_p95']:.3f}",
                                     f"{c['ratio']:.1f}"]


def test_floor_subcommand_seed_changes_the_draws(predictions, capsys):
    main(["floor", str(predictions), "--sims", "50"])
    first = capsys.readouterr().out
    main(["floor", str(predictions), "--sims", "50", "--seed", "1"])
    assert capsys.readouterr().out != first


def test_summarize_subcommand_with_floor(predictions, tmp_path, capsys):
    out = tmp_path / "summary.offline.json"
    assert main(["summarize", str(predictions), "--out", str(out), "--ece-floor-sims", "50"]) == 0
    written = out.read_text()
    data = json.loads(written)
    assert written == json.dumps(summarize(records(), ece_floor_sims=50), indent=2, sort_keys=True) + "\n"
    assert data["floor"] == floor_block(_core(), sims=50, seed=0)
    assert sorted(data["families"]) == ["orig", "text"] and "inject_text" in data["injection"]
    assert data["floor"]["text"]["vsr"]["ece"] == data["families"]["text"]["vsr"]["ece"]
    printed = capsys.readouterr().out
    assert "ECE noise floor" in printed and "Injection" in printed


def test_summarize_subcommand_without_floor(predictions, tmp_path, capsys):
    out = tmp_path / "summary.offline.json"
    assert main(["summarize", str(predictions), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert "floor" not in data and data["families"]["orig"]["vsr"]["n_rows"] == N_GROUPS
    assert "ECE noise floor" not in capsys.readouterr().out
