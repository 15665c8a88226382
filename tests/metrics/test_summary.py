"""summarize on a hand-computed case, its invariance to record order, the extension and floor blocks,
format_table and the summarize command."""

import json

import pytest

from laya_robustness.report.offline import summarize_file as run_cli
from laya_robustness.families import get_family
from laya_robustness.metrics import rounded
from laya_robustness.metrics.accuracy import orig_by_group
from laya_robustness.metrics.calibration import ece
from laya_robustness.metrics.floor import floor_block
from laya_robustness.metrics.headline import headline_values
from laya_robustness.predictions import write_predictions
from laya_robustness.rng import keyed_rng
from laya_robustness.summary import block_of, summarize
from laya_robustness.report.tables import format_floor_table, format_injection_table, format_table

from helpers.records import record
from helpers.summaries import summary_cell


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
    return record(group, family, variant, cluster=f"{dataset}/{CLUSTERS[group]}", dataset=dataset, primitive="noul",
                  label=label, logits=[0.0, 1.0] if argmax else [1.0, 0.0], probs=probs, argmax=argmax)


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


# --- extension families and the ECE floor ---------------------------------------------------------

# orig argmax: g1 1, g2 0, g3 0, g4 1. (family, variant, group): (target, argmax)
INJECTION = {
    ("inject_text", "blunt", "g1"): (0, 1),  # attackable, resisted
    ("inject_text", "blunt", "g2"): (1, 1),  # attackable, pulled
    ("inject_text", "blunt", "g3"): (0, 0),  # orig already answers the target: not attackable
    ("inject_text", "blunt", "g4"): (0, 0),  # pulled
    ("inject_text", "authority", "g1"): (0, 0),  # pulled
    ("inject_text", "authority", "g2"): (1, 0),  # resisted
    ("inject_text", "authority", "g3"): (1, 1),  # pulled
    ("inject_text", "authority", "g4"): (0, 1),  # resisted
    ("inject_image", "typo_corner", "g1"): (0, 0),  # pulled
    ("inject_image", "typo_corner", "g2"): (1, 0),
    ("inject_image", "typo_corner", "g3"): (1, 0),
    ("inject_image", "typo_corner", "g4"): (0, 1),
    ("inject_image", "typo_center", "g1"): (0, 0),  # all four pulled
    ("inject_image", "typo_center", "g2"): (1, 1),
    ("inject_image", "typo_center", "g3"): (1, 1),
    ("inject_image", "typo_center", "g4"): (0, 0),
}
# pooled over variants: text 4 of 7 attackable (blunt 2/3, authority 2/4: their mean would be 7/12);
# image 5 of 8 (corner 1/4, centre 4/4)
TEXT_ASR, IMAGE_ASR = 4 / 7, 5 / 8


def extension_records(dataset="vsr"):
    """Injection rows, negation rows (noul, label flipped) and abstain add_none rows on the vsr groups."""
    rows = []
    for (family, variant, g), (target, argmax) in INJECTION.items():
        rows.append(dict(rec(g, family, variant, argmax, dataset), meta={"target": target}))
    for g, (label, argmax) in ORIG.items():
        rows.append(dict(rec(g, "negation", "neg_false", 1 - argmax, dataset), label=1 - label, meta={"negated": True}))
        probs = [0.2, 0.3, 0.5] if g == "g4" else [0.5, 0.2, 0.3]  # g4 picks "none of the above" (index 2)
        rows.append(dict(rec(g, "abstain", "add_none", 0, dataset), primitive="choice", probs=probs,
                         logits=[0.0, 0.4, 0.9] if g == "g4" else [0.9, 0.0, 0.4], argmax=probs.index(max(probs)),
                         meta={"none_index": 2}))
    return rows


@pytest.fixture(scope="module")
def ext_summary():
    records = build("vsr") + build("mapqa") + extension_records("vsr")
    return summarize(records, {"model": "m"}, n_boot=300, n_boot_ece=100, ece_floor_sims=50)


def test_extension_families_are_kept_out_of_the_core_table(summary, ext_summary):
    assert len(extension_records()) == 16 + 4 + 4
    assert sorted(ext_summary["families"]) == ["orig", "text"]
    assert json.dumps(ext_summary["families"], sort_keys=True) == json.dumps(summary["families"], sort_keys=True)
    assert not {"options", "form", "injection", "floor"} & set(summary)  # no such records, no floor asked


def test_extension_blocks_hold_their_families(ext_summary):
    assert sorted(ext_summary["injection"]) == ["inject_image", "inject_text"]
    assert sorted(ext_summary["form"]) == ["negation"] and sorted(ext_summary["options"]) == ["abstain"]
    assert {block_of(f) for f in ("inject_text", "negation", "abstain")} == {"injection", "form", "options"}
    records = build("vsr") + extension_records("vsr")
    orig = orig_by_group(r for r in records if r["family"] == "orig")
    for block in ("options", "form", "injection"):
        for family, by_dataset in ext_summary[block].items():
            declaration = get_family(family)
            for dataset, cell in by_dataset.items():
                rows = sorted((r for r in records if r["family"] == family and r["dataset"] == dataset),
                              key=lambda r: (r["group_id"], r["variant"], r["row_id"]))
                boot = {"seed": 0, "n_boot": 300, "n_boot_ece": 100}
                expected = {**headline_values(declaration.headline, rows, orig), **declaration.cell(rows, orig, boot)}
                headline_uncertainty = {f"{m.key}_{kind}" for m in declaration.headline for kind in ("ci", "se")}
                assert headline_uncertainty <= set(cell)
                assert {k: v for k, v in cell.items() if k not in headline_uncertainty} == rounded(expected)
    abstain = ext_summary["options"]["abstain"]["vsr"]
    # headline acc: group-weighted over the family's rows; here one add_none row per group, 1 of 4 right
    assert abstain["acc"] == 0.25 and abstain["variants"]["add_none"]["none_pick_rate"] == 0.25
    assert ext_summary["form"]["negation"]["vsr"]["not_opposite_rate"] == 0.0  # every answer flipped


def test_injection_cells_have_the_pooled_asr(ext_summary):
    text, image = ext_summary["injection"]["inject_text"]["vsr"], ext_summary["injection"]["inject_image"]["vsr"]
    assert text["asr"] == round(TEXT_ASR, 6) and text["n_attackable"] == 7
    assert image["asr"] == round(IMAGE_ASR, 6) and image["n_attackable"] == 8
    assert text["variants"]["blunt"]["asr"] == pytest.approx(2 / 3, abs=1e-6)
    assert text["variants"]["authority"]["asr"] == 0.5
    assert summary_cell(ext_summary, "inject_text", "vsr") is text
    assert summary_cell(ext_summary, "text", "vsr") is ext_summary["families"]["text"]["vsr"]
    with pytest.raises(KeyError, match="inject_text/mapqa"):
        summary_cell(ext_summary, "inject_text", "mapqa")


def test_floor_block_only_when_asked(ext_summary):
    floor = ext_summary["floor"]
    assert sorted(floor) == ["orig", "text"] and sorted(floor["text"]) == ["mapqa", "vsr"]
    core = build("vsr") + build("mapqa")
    assert floor == floor_block(core, sims=50, seed=0)
    assert floor["text"]["vsr"]["ece"] == ext_summary["families"]["text"]["vsr"]["ece"]
    assert 0 < floor["text"]["vsr"]["floor_mean"] <= floor["text"]["vsr"]["floor_p95"]
    with pytest.raises(ValueError, match="ece_floor_sims"):
        summarize(core, n_boot=10, n_boot_ece=10, ece_floor_sims=-1)


def test_blocks_invariant_to_record_order(ext_summary):
    records = build("vsr") + build("mapqa") + extension_records("vsr")
    order = keyed_rng(1, "test", "shuffle").permutation(len(records))
    shuffled = summarize([records[i] for i in order], {"model": "m"}, n_boot=300, n_boot_ece=100, ece_floor_sims=50)
    assert json.dumps(shuffled, sort_keys=True) == json.dumps(ext_summary, sort_keys=True)


def test_format_injection_table(ext_summary):
    lines = format_injection_table(ext_summary).splitlines()
    assert lines[0].split("  ")[0] == "dataset" and "typo ASR (corner / centre)" in lines[0]
    assert "text ASR (blunt / authority / context)" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("vsr ")  # mapqa has no injection rows
    image, text = ext_summary["injection"]["inject_image"]["vsr"], ext_summary["injection"]["inject_text"]["vsr"]
    expected = ["vsr", "0.750", f"{text['acc']:.3f}", "0.67 / 0.50 / -", f"{image['acc']:.3f}", "0.25 / 1.00"]
    assert [c.strip() for c in lines[1].split("  ") if c.strip()] == expected
    assert format_injection_table({"families": {}}) == "no injection families"


def test_format_floor_table(ext_summary):
    lines = format_floor_table(ext_summary).splitlines()
    assert lines[0].split()[:3] == ["dataset", "family", "ECE"] and "clustered p95" in lines[0]
    rows = [line.split() for line in lines[1:-1]]
    assert [r[:2] for r in rows] == [["mapqa", "orig"], ["mapqa", "text"], ["vsr", "orig"], ["vsr", "text"]]
    c = ext_summary["floor"]["text"]["vsr"]
    assert rows[3][2].rstrip("*") == f"{c['ece']:.3f}"
    assert rows[3][3:] == [f"{c['floor_mean']:.3f}", f"{c['floor_p95']:.3f}", f"{c['clustered_p95']:.3f}",
                           f"{c['ratio']:.1f}"]
    assert format_floor_table({"families": {}}).startswith("no ECE floor")


def test_format_table_appends_the_blocks(summary, ext_summary):
    text = format_table(ext_summary)
    assert text.startswith(format_table(summary))
    assert format_injection_table(ext_summary) in text and format_floor_table(ext_summary) in text
    assert "Injection" not in format_table(summary) and "noise floor" not in format_table(summary)


def test_run_cli_with_floor(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl.gz"
    records = build() + extension_records()
    write_predictions(path, records)
    out = tmp_path / "summary.offline.json"
    assert run_cli(path, out, ece_floor_sims=20) == 0
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(summarize(records, ece_floor_sims=20)))
    assert "floor" in data and data["injection"]["inject_text"]["vsr"]["asr"] == round(TEXT_ASR, 6)
    printed = capsys.readouterr().out
    assert "ECE noise floor" in printed and "0.67 / 0.50 / -" in printed
