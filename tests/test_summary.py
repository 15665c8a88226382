"""summarize on a hand-computed case, its invariance to record order, format_table and run_cli."""

import json

import pytest

from laya_robustness.metrics.calibration import ece
from laya_robustness.predictions import write_predictions
from laya_robustness.rng import keyed_rng
from laya_robustness.summary import format_table, run_cli, summarize

CLUSTERS = {"g1": "c1", "g2": "c1", "g3": "c2", "g4": "c3"}
ORIG = {"g1": (1, 1), "g2": (0, 0), "g3": (1, 0), "g4": (1, 1)}  # group: (label, argmax); acc 3/4
TEXT = {  # (group, variant): argmax
    ("g1", "a"): 1, ("g1", "b"): 0,  # 1/2 right, 1/2 flipped
    ("g2", "a"): 0, ("g2", "b"): 0, ("g2", "c"): 0,  # all right, none flipped (three rows, counted once)
    ("g3", "a"): 1, ("g3", "b"): 1,  # all right, all flipped
    ("g4", "a"): 0, ("g4", "b"): 0,  # all wrong, all flipped
}


def rec(group, family, variant, argmax, dataset="vsr", conf=0.8):
    label = ORIG[group][0]
    probs = [round(1 - conf, 5), conf] if argmax == 1 else [conf, round(1 - conf, 5)]
    return {
        "row_id": group if family == "orig" else f"{group}|{family}|{variant}", "group_id": group,
        "cluster": f"{dataset}/{CLUSTERS[group]}", "dataset": dataset, "family": family, "variant": variant,
        "primitive": "noul", "label": label, "logits": [0.0, 1.0] if argmax else [1.0, 0.0], "probs": probs,
        "argmax": argmax,
    }


def build(dataset="vsr"):
    rows = [rec(g, "orig", "orig", am, dataset, conf=0.9) for g, (_, am) in ORIG.items()]
    rows += [rec(g, "text", v, am, dataset, conf=0.6 + 0.05 * i) for i, ((g, v), am) in enumerate(TEXT.items())]
    return rows


@pytest.fixture(scope="module")
def summary():
    return summarize(build("vsr") + build("mapqa"), {"model": "m"}, n_boot=300, n_boot_ece=100)


def test_shape(summary):
    assert summary["meta"] == {"model": "m"}
    assert sorted(summary["families"]) == ["orig", "text"]
    cell = summary["families"]["text"]["vsr"]
    keys = {"n_groups", "n_rows", "acc", "acc_ci", "delta", "delta_ci", "flip", "ece", "ece_ci",
            "balanced_acc", "chance", "majority", "variants"}
    assert keys <= set(cell)
    assert sorted(cell["variants"]) == ["a", "b", "c"]
    assert set(cell["variants"]["a"]) == {"acc", "delta", "flip", "n_rows"}


def test_text_cell_by_hand(summary):
    cell = summary["families"]["text"]["vsr"]
    assert (cell["n_groups"], cell["n_rows"]) == (4, 9)
    assert cell["acc"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)  # 0.625, not the pooled 6/9
    assert cell["delta"] == pytest.approx(((0.5 - 1) + 0 + (1 - 0) + (0 - 1)) / 4)  # -0.125
    assert cell["flip"] == pytest.approx((0.5 + 0 + 1 + 1) / 4)  # 0.625
    assert cell["chance"] == 0.5 and cell["majority"] == 0.75
    assert cell["acc_ci"][0] <= cell["acc"] <= cell["acc_ci"][1] and cell["acc_ci"][0] < cell["acc_ci"][1]
    assert cell["delta_ci"][0] <= cell["delta"] <= cell["delta_ci"][1]
    rows = [r for r in build() if r["family"] == "text"]
    expected_ece = ece([max(r["probs"]) for r in rows], [r["argmax"] == r["label"] for r in rows])
    assert expected_ece > 0.05 and cell["ece"] == pytest.approx(expected_ece, abs=1e-6)


def test_variants_by_hand(summary):
    v = summary["families"]["text"]["vsr"]["variants"]
    assert v["a"] == {"acc": 0.75, "delta": 0.0, "flip": 0.5, "n_rows": 4}
    assert v["b"] == {"acc": 0.5, "delta": -0.25, "flip": 0.75, "n_rows": 4}
    assert v["c"] == {"acc": 1.0, "delta": 0.0, "flip": 0.0, "n_rows": 1}


def test_orig_cell(summary):
    cell = summary["families"]["orig"]["vsr"]
    assert cell["acc"] == 0.75 and cell["delta"] == 0.0 and cell["flip"] == 0.0
    assert cell["delta_ci"] == [0.0, 0.0]
    assert cell["balanced_acc"] == pytest.approx((2 / 3 + 1) / 2, abs=1e-6)
    assert cell["variants"] == {"orig": {"acc": 0.75, "delta": 0.0, "flip": 0.0, "n_rows": 4}}


def test_invariant_to_record_order(summary):
    records = build("vsr") + build("mapqa")
    order = keyed_rng(0, "test", "shuffle").permutation(len(records))
    shuffled = summarize([records[i] for i in order], {"model": "m"}, n_boot=300, n_boot_ece=100)
    assert list(order) != sorted(order)
    assert json.dumps(shuffled, sort_keys=True) == json.dumps(summary, sort_keys=True)


def test_family_without_orig_rows_has_no_delta():
    rows = [r for r in build() if r["family"] == "text"]
    cell = summarize(rows, n_boot=50, n_boot_ece=20)["families"]["text"]["vsr"]
    assert cell["acc"] == 0.625
    assert cell["delta"] is None and cell["delta_ci"] is None and cell["flip"] is None


def test_bad_records_are_errors():
    rows = build()
    with pytest.raises(ValueError, match="more than once"):
        summarize(rows + [rows[0]], n_boot=10, n_boot_ece=10)
    split = dict(rows[-1], cluster="elsewhere")
    with pytest.raises(ValueError, match="spans clusters"):
        summarize(rows[:-1] + [split], n_boot=10, n_boot_ece=10)


def test_format_table(summary):
    text = format_table(summary)
    lines = text.splitlines()
    assert any(line.startswith("vsr ") for line in lines) and any(line.startswith("mapqa ") for line in lines)
    vsr = next(line for line in lines if line.startswith("vsr "))
    lo, hi = summary["families"]["orig"]["vsr"]["acc_ci"]
    assert f"0.750 [{lo:.3f}, {hi:.3f}]" in vsr
    assert "0.625 / -0.125 / 0.625" in vsr and "0.500 / 0.750" in vsr
    assert vsr.count(" - ") >= 3  # option_order, image, image_shuffle, text_only absent
    assert any(line.startswith("mean of 2") and "0.625 / -0.125 / 0.625" in line for line in lines)
    ece_vsr = [line for line in lines if line.startswith("vsr ")][1]
    assert f"{summary['families']['text']['vsr']['ece']:.3f}" in ece_vsr


def test_run_cli(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl.gz"
    write_predictions(path, build())
    (tmp_path / "summary.json").write_text(json.dumps({"meta": {"seed": 3, "model": "tiny"}, "families": {}}))
    out = tmp_path / "resummary.json"
    assert run_cli(path, out) == 0
    written = out.read_text()
    assert written.endswith("}\n")
    data = json.loads(written)
    assert data["meta"] == {"seed": 3, "model": "tiny"}
    assert data["families"]["text"]["vsr"]["acc"] == 0.625
    assert written == json.dumps(summarize(build(), data["meta"]), indent=2, sort_keys=True) + "\n"
    assert "vsr" in capsys.readouterr().out
