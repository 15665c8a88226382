"""The report package: verdict cells, curves, flipped examples, the baseline comparison, HTML / Markdown and the CLI.

Most tests share one small run: the five fixture sets (12 rows each) under every default question family,
scored by the fake oracle scorer (gold preferred, keyed noise: real flips), summarised with few
bootstrap resamples.
"""

import base64
import gzip
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

import pytest
from PIL import Image

from laya_robustness.__main__ import main
from laya_robustness.gate.judgement import evaluate_cell
from laya_robustness.gate.results import CheckResult
from laya_robustness.families import declared, get_family
from laya_robustness.recipes.fixture_rows import SET_NAMES
from laya_robustness.answers import is_correct
from laya_robustness.metrics.calibration import ece
from laya_robustness.predictions import write_predictions
from laya_robustness.records import ORIG
from laya_robustness.report import load_limits, render_files, write_report
from laya_robustness.report.build import build_report
from laya_robustness.report.cell_rows import cell_rows, cell_verdicts, columns_of, evaluate_summary, summary_blocks
from laya_robustness.report.baseline_changes import summary_changes
from laya_robustness.report.curves import reliability, strength_curves
from laya_robustness.report.examples import BROKEN, FLIPPED, check_source_rows, rebuild_rows, select_examples
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.summary import summarize

from helpers.report_folders import SEED, make_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def limits(run):
    return load_limits(run["summary"], ROOT / "thresholds.toml", None)


# ------------------------------------------------------------------------------------------- cells


def test_verdict_of_each_check_by_hand():
    results = [CheckResult("text", "d", "max_flip", False, 0.3, 0.2, None, "too many"),
               CheckResult("text", "d", "max_drop", True, -0.01, 0.05, (-0.03, 0.01), "fine"),
               CheckResult("image", "d", "min_acc", True, 0.9, 0.5, None, "fine"),
               CheckResult("orig", "d", "min_acc", False, 0.4, 0.5, None, "low")]
    known = {("text", "d", "max_drop"): "declared", ("image", "d", "min_acc"): "old", ("orig", "d", "min_acc"): "why"}
    v = cell_verdicts(results, lambda f, d, c: known.get((f, d, c)))
    assert (v[("text", "d")].outcome, v[("text", "d")].short()) == ("fail", "FAIL max_flip")
    assert [c.status for c in v[("text", "d")].checks] == ["fail", "xpass"]
    assert v[("image", "d")].short() == "XPASS min_acc"
    assert v[("orig", "d")].short() == "xfail min_acc" and v[("orig", "d")].checks[0].reason == "why"
    # the session's dict form (with a device) gives the same
    assert cell_verdicts([{**asdict(r), "device": "cpu"} for r in results], lambda *a: None)[("image", "d")].outcome \
        == "pass"


def test_blocks_and_columns_come_from_the_declarations(run):
    summary = run["summary"]
    blocks = summary_blocks(summary)
    not_blocks = ("meta", "bootstrap", "stability_analysis", "floor", "baseline")  # not per-family cells
    assert blocks[0] == "families" and set(blocks) == {k for k in summary if k not in not_blocks}
    for block in blocks:
        keys = columns_of(summary, block)
        for family in summary[block]:
            if family == "any":  # the stability block's pooled row: no family of its own, AV and V
                assert block == "stability" and {"av", "v"} <= set(keys)
                continue
            assert set(get_family(family).headline_keys) <= set(keys)
    assert columns_of(summary, "families") == ["acc", "delta", "flip", "ece"]
    rows = cell_rows(summary, {}, "injection")
    assert [(r.family, r.dataset) for r in rows][:2] == [("inject_text", "colour_choice"), ("inject_text",
                                                                                              "context_choice")]


def test_offline_verdicts_are_the_gate_checks(run, limits):
    """evaluate_summary checks what the gate's tests check: evaluate_cell with each cell's limits, judged as
    the gate judges them (alpha / m over the m interval-judged limits)."""
    from laya_robustness.gate.judgement import Judgement

    summary = run["summary"]
    results = evaluate_summary(summary, limits)
    declared_names = {f.name for f in declared()}  # the pooled "any" row has no limits (see the next test)
    cells = [(family, dataset, cell) for block in summary_blocks(summary)
             for family, by_dataset in summary[block].items() if family in declared_names
             for dataset, cell in by_dataset.items()]
    m = sum(limits.judge_for(f, d, c) == "interval" for f, d, _ in cells for c in limits.limits_for(f, d))
    expected = []
    for family, dataset, cell in cells:
        judgement = Judgement(lambda check, f=family, d=dataset: limits.judge_for(f, d, check),
                              limits.gate.alpha_each(m))
        expected += evaluate_cell(family, dataset, cell, limits.limits_for(family, dataset), judgement)
    assert sorted(map(repr, results)) == sorted(map(repr, expected))
    assert any(not r.passed for r in results) and any(r.passed for r in results)
    assert {r.decision for r in results} >= {"fail", "pass", "undecided"}


def test_an_undeclared_row_of_a_block_is_shown_without_limits(run, limits):
    summary = json.loads(json.dumps(run["summary"]))
    summary["injection"]["any"] = {"colour_choice": {"acc": 0.5, "asr": 0.25}}
    assert all(r.family != "any" for r in evaluate_summary(summary, limits))
    rows = cell_rows(summary, {}, "injection")
    assert (rows[-1].family, rows[-1].verdict.short()) == ("any", "-")


def test_a_check_on_an_undefined_metric_fails_instead_of_passing(limits):
    summary = {"families": {"image": {"colour_choice": {"acc": 0.5, "delta": 0.0, "delta_ci": [0, 0], "flip": None,
                                                         "ece": 0.0}}}}
    results = evaluate_summary(summary, limits)
    bad = [r for r in results if r.check == "max_flip"]
    assert len(bad) == 1 and not bad[0].passed and math.isnan(bad[0].value) and "undefined" in bad[0].detail


# ------------------------------------------------------------------------------------------ curves


def test_reliability_bins_by_hand():
    rows = [{"family": "f", "label": 0, "argmax": a, "probs": [p, 1 - p]}
            for a, p in [(0, 0.95), (0, 0.97), (1, 0.96), (0, 0.55), (1, 0.52)]]
    (d,) = reliability(rows)
    # bins of width 1/15: 0.95-0.97 -> bin 14 (acc 2/3), 0.55 -> bin 8 (right), 0.52 -> bin 7 (wrong)
    assert [(round(b[0] * 15), b[1]) for b in d.bins] == [(7, 1), (8, 1), (14, 3)]
    assert d.bins[2][3] == pytest.approx(2 / 3) and d.bins[2][2] == pytest.approx(0.96)
    assert d.ece == pytest.approx(ece([max(r["probs"]) for r in rows], [is_correct(r) for r in rows]))


def test_reliability_ece_matches_the_calibration_module(run):
    for d in reliability(run["records"]):
        rows = [r for r in run["records"] if r["family"] == d.family and r["label"] >= 0]
        assert d.ece == pytest.approx(ece([max(r["probs"]) for r in rows], [is_correct(r) for r in rows]))
        assert sum(b[1] for b in d.bins) == d.n_rows == len(rows)


def test_strength_curves_against_a_plain_loop(run):
    curves = {(c.family, c.label): c for c in strength_curves(run["records"])}
    # every visual family's ops with two or more strengths; rescale and scale (one factor each) have no curve
    assert set(curves) == {("image", "jpeg quality"), ("image", "crop area"), ("image", "brightness factor"),
                           ("shift", "shift dx"), ("pad_crop", "pad n"), ("pad_crop", "crop n"),
                           ("rotation", "rotate angle")}
    jpeg = curves[("image", "jpeg quality")]
    orig = {(r["dataset"], r["group_id"]): r for r in run["records"] if r["family"] == ORIG}
    for dataset, points in jpeg.points.items():
        assert [p[0] for p in points] == [20, 40, 70]
        for quality, acc, flip, n in points:
            rows = [r for r in run["records"] if r["family"] == "image" and r["dataset"] == dataset
                    and r["meta"]["image_op"].get("quality") == quality]
            # one row per group for each quality: the group-weighted means are plain means
            assert n == len(rows)
            assert acc == pytest.approx(sum(r["argmax"] == r["label"] for r in rows) / n)
            assert flip == pytest.approx(sum(r["argmax"] != orig[(dataset, r["group_id"])]["argmax"] for r in rows) / n)


def test_a_meta_key_copied_from_the_source_rows_is_no_strength_axis():
    recs = [{"dataset": "d", "group_id": g, "cluster": g, "family": f, "variant": v, "label": 0, "argmax": 0,
             "probs": [0.9, 0.1], "logits": [1, 0], "meta": {"image_op": {"op": "blur", "radius": 1}, "n": n}}
            for g, n in (("a", 1), ("b", 2)) for f, v in (("image", "blur1"), ("image", "blur1b"))]
    assert strength_curves(recs) == []  # radius takes one value; "n" is not read outside visual families


# ---------------------------------------------------------------------------------------- examples


def _rec(group, family, variant, argmax, label=0, p=0.8, dataset="d"):
    probs = [p if i == argmax else (1 - p) / 2 for i in range(3)]
    return {"row_id": f"{group}|{family}|{variant}", "group_id": group, "cluster": group, "dataset": dataset,
            "family": family, "variant": variant, "label": label, "argmax": argmax, "probs": probs,
            "logits": [0, 0, 0], "meta": {}}


def test_worst_groups_by_hand():
    recs = [_rec("a", ORIG, ORIG, 0), _rec("b", ORIG, ORIG, 0), _rec("c", ORIG, ORIG, 1),
            _rec("a", "text", "x", 1, p=0.6), _rec("a", "text", "y", 0),       # a: 1 of 2 flipped
            _rec("b", "text", "x", 2, p=0.9), _rec("b", "text", "y", 1, p=0.7),  # b: 2 of 2, most confident 0.9
            _rec("c", "text", "x", 1),                                          # c: never flipped
            _rec("a", "negation", "n", 1), _rec("c", "negation", "n", 2)]      # broke: a (orig right), not c
    picked = select_examples(recs, per_family=5, per_group=3)
    text = picked["text"]
    assert [(e.group_id, e.share, e.how) for e in text] == [("b", 1.0, FLIPPED), ("a", 0.5, FLIPPED)]
    assert [r["variant"] for r in text[0].variants] == ["x", "y"]  # most confident flip first
    assert [(e.group_id, e.how) for e in picked["negation"]] == [("a", BROKEN)]


def test_every_dataset_gets_its_turn():
    recs = []
    for dataset in ("d1", "d2"):
        for g in ("a", "b", "c"):
            recs += [_rec(g, ORIG, ORIG, 0, dataset=dataset), _rec(g, "text", "x", 1, dataset=dataset)]
    picked = select_examples(recs, per_family=3)["text"]
    assert [(e.dataset, e.group_id) for e in picked] == [("d1", "a"), ("d2", "a"), ("d1", "b")]


def test_rebuilt_rows_are_the_scored_rows(run):
    examples = select_examples(run["records"])
    rows = rebuild_rows(examples, run["source"], SEED)
    assert set(examples) >= {"option_order", "text", "image", "image_shuffle", "text_only"}
    for family_examples in examples.values():
        for e in family_examples:
            for rec in (e.orig, *e.variants):
                row = rows[rec["row_id"]]
                assert (row.family, row.variant, row.label, len(row.options)) == (
                    rec["family"], rec["variant"], rec["label"], len(rec["logits"]))


def test_rebuilding_from_other_data_is_an_error(run):
    examples = select_examples(run["records"])
    with pytest.raises(ValueError, match="render with the data, seed and rows per set the run used"):
        rebuild_rows(examples, run["source"], SEED + 1)  # another seed: other variants (or none of these ids)
    with pytest.raises(ValueError, match="is not in the data"):
        rebuild_rows(examples, {}, SEED)
    fewer = {name: rows[:-1] for name, rows in run["source"].items()}
    with pytest.raises(ValueError, match="the data has 11 rows of dataset 'colour_choice', the run scored 12"):
        check_source_rows(run["summary"]["meta"], fewer)
    check_source_rows(run["summary"]["meta"], run["source"])
    fingerprint = {**run["summary"]["meta"], "data_fingerprint": "0" * 16}
    with pytest.raises(ValueError, match="fingerprint differs"):
        check_source_rows(fingerprint, run["source"])


# ----------------------------------------------------------------------------------------- compare


def test_changes_in_words(run):
    summary = run["summary"]
    old = json.loads(json.dumps(summary))
    cell = old["families"]["text"]["colour_choice"]
    cell["acc"], cell["acc_ci"] = 0.99, [0.98, 1.0]
    cell["flip"] = summary["families"]["text"]["colour_choice"]["flip"] + 0.0001  # below the shown precision
    del old["families"]["image"]["count_choice"]
    lines = summary_changes(summary, old)
    acc = summary["families"]["text"]["colour_choice"]["acc"]
    assert f"colour_choice text acc 0.990 -> {acc:.3f}, outside the previous interval [0.980, 1.000]" in lines
    assert "count_choice image: new (not in the baseline)" in lines
    assert not any("colour_choice text flip" in line for line in lines)
    assert summary_changes(summary, summary) == ["no change at the reported precision (3 d.p.)"]
    assert summary_changes(summary, old, limit=1)[-1].startswith("... and 1 more change")


# ------------------------------------------------------------------------------------------ render

DATA_URI = re.compile(r'src="(data:[^"]+)"')


def _decode(uri: str):
    head, payload = uri.split(",", 1)
    raw = base64.b64decode(payload)
    if head.startswith("data:image/svg+xml"):
        return ET.fromstring(raw)
    with Image.open(io.BytesIO(raw)) as im:
        im.load()
        return im.size


def test_report_html_is_self_contained_and_every_image_decodes(run, limits, tmp_path):
    results = evaluate_summary(run["summary"], limits)
    paths = write_report(tmp_path, run["summary"], run["records"], results=results, source_rows=run["source"],
                         known=lambda f, d, c: None)
    page = paths[0].read_text()
    assert paths[0].stat().st_size < 5_000_000
    assert "<script" not in page and not re.search(r'(src|href)="(?!data:|#)', page)
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    uris = DATA_URI.findall(page)
    kinds = [u.split(";")[0] for u in uris]
    assert kinds.count("data:image/svg+xml") == 2  # reliability + strength
    assert "data:image/png" in kinds
    for uri in uris:
        assert _decode(uri) is not None
    # every family with a flipped row has its section, each example its orig and variant images
    report = build_report(run["summary"], run["records"], results=results, source_rows=run["source"])
    for family, examples in report.examples.items():
        assert f'id="ex-{family}"' in page
    n_images = sum(len(report.rows[r["row_id"]].images) for ex in report.examples.values() for e in ex
                   for r in (e.orig, *e.variants))
    assert kinds.count("data:image/png") + kinds.count("data:image/jpeg") == n_images
    for block in summary_blocks(run["summary"]):
        assert f"{block}" in page
    assert page.count('class="tag fail"') >= 1 + sum(v.outcome == "fail" for v in report.verdicts.values())


def test_rendering_twice_gives_the_same_bytes(run, tmp_path):
    a = write_report(tmp_path / "a", run["summary"], run["records"], source_rows=run["source"])
    b = write_report(tmp_path / "b", run["summary"], run["records"], source_rows=run["source"])
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_markdown_comment(run, limits, tmp_path):
    results = evaluate_summary(run["summary"], limits)
    md = write_report(tmp_path, run["summary"], run["records"], results=results)[1].read_text()
    verdicts = cell_verdicts(results, lambda *a: None)
    fails = sum(v.outcome == "fail" for k, v in verdicts.items() if k[0] != "invariance")
    assert f"**Verdicts:** {fails} FAIL" in md
    assert "| family (acc / delta / flip / ece) | colour_choice | context_choice | count_choice |" in md
    text = run["summary"]["families"]["text"]["colour_choice"]
    assert f"{text['acc']:.3f} / {text['delta']:+.3f} / {text['flip']:.3f} / {text['ece']:.3f}" in md
    assert "the examples show no images" in md  # no source rows given
    failed = [r for r in results if not r.passed]
    assert all(f"- **FAIL** {r.family}/{r.dataset} {r.check}:" in md for r in failed)


def test_cli_renders_from_the_files_with_a_baseline(run, tmp_path, tmp_path_factory, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # ./thresholds.toml is the default limits file
    other = make_run(tmp_path_factory.mktemp("other"), margin=2.0)
    rc = main(["report", str(run["out"] / "predictions.jsonl.gz"), "--out", str(tmp_path),
               "--baseline", str(other["out"] / "predictions.jsonl.gz")])
    assert rc == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'report.html'}",
                                                    f"wrote {tmp_path / 'summary.md'}"]
    md = (tmp_path / "summary.md").read_text()
    assert "#### Against the baseline" in md and "outside the previous interval" in md
    page = (tmp_path / "report.html").read_text()
    assert "data:image/png" in page  # rows rebuilt from the meta's data
    assert "no limits were checked" not in page


def test_cli_errors_name_the_problem(run, tmp_path, capsys):
    bad = tmp_path / "predictions.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"row_id": "x"}\n'))
    assert main(["report", str(bad), "--out", str(tmp_path)]) == 4
    assert f"{bad}:1: field 'group_id': missing" in capsys.readouterr().err
    assert main(["report", str(run["out"] / "predictions.jsonl.gz"), "--thresholds", str(tmp_path / "nope.toml"),
                 "--out", str(tmp_path)]) == 4
    assert "--thresholds: no such file" in capsys.readouterr().err
    assert main(["report", str(run["out"] / "predictions.jsonl.gz"), "--data", str(tmp_path / "rows"),
                 "--out", str(tmp_path)]) == 4
    capsys.readouterr()


def test_without_data_or_limits_the_report_says_so(run, tmp_path):
    summary = {**run["summary"], "meta": {k: v for k, v in run["summary"]["meta"].items() if k != "data"}}
    (run["out"].parent / "nodata").mkdir(exist_ok=True)
    write_predictions(run["out"].parent / "nodata" / "predictions.jsonl.gz", run["records"])
    (run["out"].parent / "nodata" / "summary.json").write_text(json.dumps(summary))
    html_path, md_path = render_files(run["out"].parent / "nodata" / "predictions.jsonl.gz", tmp_path,
                                      thresholds=None)
    page = html_path.read_text()
    assert "no limits were checked" in page and "the examples show no images" in page
    assert "data:image/png" not in page and 'class="noimg">no data' in page


def test_open_answer_rows_are_shown_by_their_text(tmp_path):
    def rec(group, family, variant, answer, correct):
        return {"row_id": f"{group}|{family}|{variant}", "group_id": group, "cluster": group, "dataset": "vqa",
                "family": family, "variant": variant, "primitive": "open", "label": -1, "argmax": -1, "logits": [],
                "probs": [], "meta": {}, "raw_answer": answer.title(), "answer": answer, "answers": ["red"],
                "correct": correct, "n_images": 1}

    recs = [rec("a", ORIG, ORIG, "red", True), rec("a", "text", "prefix", "blue", False),
            rec("a", "text", "suffix", "red", True)]
    (example,) = select_examples(recs)["text"]
    assert (example.share, [r["variant"] for r in example.variants]) == (0.5, ["prefix"])
    assert reliability(recs) == []  # no probabilities to bin
    summary = summarize(recs, n_boot=10, n_boot_ece=5)
    page = write_report(tmp_path, summary, recs)[0].read_text()
    assert "answer blue, label -1" in page and "(wrong)" in page and "(right)" in page


def test_the_rows_are_read_again_with_the_captions_and_the_users_variants(tmp_path):
    """Offline, ``reread_rows`` gives the rows the gate scored: the question rows under the meta's reading rules
    and user files, and the caption rows the lgip families probed (a run's fingerprint covers both)."""
    from laya_robustness.run.inputs.run_inputs import reread_rows

    first = load_source_rows(ROOT / "laya_fixtures" / "rows", 5, 0)["exists_yesno"][0]
    (tmp_path / "reph.jsonl").write_text(json.dumps({"row_id": first.row_id, "rephrasings": ["Is it there?"]}) + "\n")
    meta = {"rows_per_set": 5, "seed": 0, "inputs": {"captions": str(ROOT / "laya_fixtures" / "captions"),
                                                     "rephrasings": str(tmp_path / "reph.jsonl"), "max_image_side": 32}}
    rows = reread_rows(ROOT / "laya_fixtures" / "rows", meta)
    assert set(rows) == {*SET_NAMES, "shape_captions"} and len(rows["colour_choice"]) == 5
    assert len(rows["shape_captions"]) == 400  # the caption file is read whole, as the gate reads it
    again = {r.row_id: r for r in rows["exists_yesno"]}[first.row_id]
    assert again.meta["rephrasings"] == ["Is it there?"] and again.images[0].size == (32, 32)


def test_a_dual_encoders_invariance_is_judged_by_its_conditions_limits(run, limits):
    stats = {"precision": "fp32", "max_abs_dp": 0.5, "max_abs_dlogit": 0.5, "flips": 0, "rows": 8, "bitwise": False}
    (result, *rest) = [r for r in evaluate_summary(run["summary"], limits, {"dual:batched": stats})
                       if r.family == "invariance"]
    assert result.dataset == "dual:batched" and not result.passed
