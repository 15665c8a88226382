"""``python -m laya_robustness served-check SERVED INPROCESS``: two runs' answers to the questions both asked, family
by family (agreement, |dp| at the option INPROCESS chose), refusing runs that asked other questions."""

import json
import shutil
from pathlib import Path

import pytest

import laya_robustness
from laya_robustness.__main__ import main, parser
from laya_robustness.predictions import read_predictions, write_predictions
from laya_robustness.records import Record
from laya_robustness.report.read_back import ReportFolder, read_folder
from laya_robustness.report.served_check import MAX_DP, MIN_AGREEMENT, markdown, served_check, text_lines

from helpers.fixture_data import first_rows

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["image_shuffle", "abstain", "option_set"]
SMALL = {"families": FAMILIES, "invariance": False, "limitations": "none", "root": ROOT}


def _data(root: Path) -> Path:
    """The first 16 rows of two fixture sets, with their images."""
    return first_rows(root, ("colour_choice", "exists_yesno"), 16)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The embedded default on the same data, in process: every row (``full``) and 5 rows per set (``narrow``)."""
    base = tmp_path_factory.mktemp("served-check")
    data = _data(base / "data")
    laya_robustness.run_gate(data=str(data), rows_per_set=0, report_dir=base / "full", **SMALL)
    laya_robustness.run_gate(data=str(data), rows_per_set=5, report_dir=base / "narrow", **SMALL)
    return base


def _copy(runs: Path, name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(runs / name, out, ignore=shutil.ignore_patterns("journal"))
    return out


def test_a_run_of_fewer_rows_asks_the_same_questions_and_gets_the_same_answers(runs, capsys):
    narrow, full = read_folder(runs / "narrow"), read_folder(runs / "full")
    check = served_check(narrow, full)
    assert check.not_comparable == [] and check.status == 0
    assert [f.family for f in check.families] == sorted(["orig", *FAMILIES])
    assert sum(f.matched for f in check.families) == len(narrow.records) < len(full.records)
    for f in check.families:
        assert f.agreement == 1.0 and f.dps and f.max_dp == 0.0 and f.mean_dp == 0.0
    assert check.weights == "weights: the same (weights_sha256)"
    assert main(["served-check", str(runs / "narrow"), str(runs / "full")]) == 0
    out = capsys.readouterr().out
    assert "SAME (exit 0)" in out and "image_shuffle" in out and "1.000" in out


def test_answers_edited_in_the_predictions_differ_exit_1(runs, tmp_path, capsys):
    served = _copy(runs, "narrow", tmp_path)
    records = read_predictions(served / "predictions.jsonl.gz")
    edited = []
    for r in records:
        if r["family"] == "abstain":  # its answer moved to the next option, probabilities and logits with it
            a, k = r["argmax"], len(r["probs"])
            b = (a + 1) % k
            for key in ("probs", "logits"):
                r[key][a], r[key][b] = r[key][b], r[key][a]
            r["argmax"] = b
        edited.append(dict(r))
    write_predictions(served / "predictions.jsonl.gz", edited)
    summary = served / "summary.json"
    assert main(["summarize", str(served / "predictions.jsonl.gz"), "--out", str(summary)]) == 0
    capsys.readouterr()
    assert main(["served-check", str(served), str(runs / "full")]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS (exit 1): abstain: agreement 0.000 below 0.95" in out and "abstain: max |dp|" in out
    assert main(["served-check", str(served), str(runs / "full"), "--min-agreement", "0", "--max-dp", "1"]) == 0


def test_folders_that_cannot_be_compared_are_exit_4_saying_why(runs, tmp_path, capsys):
    for name, edit, why in (
            ("seed", lambda meta: meta.update(seed=1), "seed differs (1 in SERVED, 0 in INPROCESS)"),
            ("weights", lambda meta: meta["model"].update(weights_sha256={"tensors": "0" * 64}),
             "weights_sha256 differs"),
            ("data", lambda meta: meta.update(rows_per_set=0, data_fingerprint="00000000"),
             "data_fingerprint differs at the same rows per set")):
        served = _copy(runs, "narrow", tmp_path / name)
        summary = json.loads((served / "summary.json").read_text())
        edit(summary["meta"])
        (served / "summary.json").write_text(json.dumps(summary))
        assert main(["served-check", str(served), str(runs / "full")]) == 4, name
        out = capsys.readouterr().out
        assert "NOT COMPARABLE (exit 4)" in out and why in out, out
    assert main(["served-check", str(tmp_path / "nothing"), str(runs / "full")]) == 4
    assert "no summary.json, predictions.jsonl.gz" in capsys.readouterr().err
    assert main(["served-check", str(runs / "narrow"), str(runs / "full"), "--max-dp", "2"]) == 4
    assert "--max-dp must be between 0 and 1, got 2.0" in capsys.readouterr().err


def _record(row_id: str, probs, argmax=None, **fields) -> Record:
    family = fields.pop("family", "image_shuffle")
    meta = fields.pop("meta", {"donor_cluster": "d/c1"})
    return Record.parse({"row_id": row_id, "group_id": row_id, "cluster": "d/c0", "dataset": "d", "family": family,
                         "variant": "shuffle", "primitive": "choice", "label": 0, "logits": [0.0] * len(probs),
                         "probs": list(probs), "argmax": probs.index(max(probs)) if argmax is None else argmax,
                         "n_images": 1, "meta": meta, **fields}, row_id)


def _folder(name: str, records, **meta) -> ReportFolder:
    summary = {"meta": {"seed": 0, "rows_per_set": 0, "data_fingerprint": "aaaa", "temperatures": {}, **meta},
               "bootstrap": {"seed": 0, "n_boot": 1, "n_boot_ece": 1}}
    return ReportFolder(Path(name), summary, None, list(records))


def test_dp_is_the_difference_at_the_option_the_in_process_run_chose():
    inprocess = _folder("in", [_record("r1", [0.7, 0.3]), _record("r2", [0.2, 0.8]), _record("r3", [0.6, 0.4])])
    served = _folder("served", [_record("r1", [0.5, 0.5], argmax=1), _record("r2", [0.1, 0.9]),
                                _record("r3", [], argmax=0, n_options=2, raw_answer="A", extraction="letter")],
                     rows_per_set=1, data_fingerprint="bbbb")
    check = served_check(served, inprocess)
    (family,) = check.families
    assert family.matched == 3 and family.same == 2 and family.agreement == pytest.approx(2 / 3)
    assert family.dps == pytest.approx((0.2, 0.1))  # r1 at option 0 (in process chose it), r2 at option 1; r3 none
    assert family.mean_dp == pytest.approx(0.15) and family.max_dp == pytest.approx(0.2)
    assert check.status == 1 and "weights: not checked (SERVED and INPROCESS records no weights_sha256" in check.weights


def test_a_matched_question_that_differs_is_named_and_nothing_is_compared():
    inprocess = _folder("in", [_record(f"r{i}", [0.7, 0.3]) for i in range(5)])
    served = _folder("served", [_record(f"r{i}", [0.7, 0.3], meta={"donor_cluster": "d/c9"}) for i in range(5)],
                     rows_per_set=2)
    check = served_check(served, inprocess)
    assert check.status == 4 and check.families == []
    (why,) = check.not_comparable
    assert why.startswith("5 matched question(s) differ ('r0': meta is {'donor_cluster': 'd/c9'} in SERVED, "
                          "{'donor_cluster': 'd/c1'} in INPROCESS;") and "and 2 more" in why


def test_no_question_in_common_is_not_comparable():
    check = served_check(_folder("s", [_record("a", [0.5, 0.5])]), _folder("i", [_record("b", [0.5, 0.5])]))
    assert check.status == 4 and "no question in common" in check.verdict()


def test_names_from_the_records_are_escaped_in_markdown_and_the_terminal():
    name = "fam|<b>\x1b[31m"
    records = [_record("r1", [0.7, 0.3], family=name)]
    check = served_check(_folder("s", records), _folder("i", records))
    page = markdown(check)
    assert "fam\\|&lt;b&gt;\\\\x1b&#91;31m" in page and "<b>" not in page and "\x1b" not in page
    assert not any("\x1b" in line for line in text_lines(check))


def test_the_options_defaults_are_the_modules():
    args = parser().parse_args(["served-check", "a", "b"])
    assert (args.min_agreement, args.max_dp) == (MIN_AGREEMENT, MAX_DP)
