"""A report folder read back by ``compare``, ``trend`` and ``report`` (``report.read_back``): a summary.json that is
not the shape of one, nested past the bound, a NaN headline, a predictions file of no record, or a summary that does
not hold what its predictions give is refused with exit 4 naming the file, never compared (it used to end in a
traceback with exit 1, "PASSED" or "moved within noise"). The reports are small synthetic ones
(``helpers.report_folders.write_folder``)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laya_robustness.__main__ import main
from laya_robustness.predictions import write_predictions
from laya_robustness.records import ORIG

from helpers.report_folders import orig_records, write_folder

ROOT = Path(__file__).resolve().parents[2]


def _edit_summary(folder: Path, edit) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(json.dumps(summary))  # NaN written as JSON's NaN, as json.dumps does


def _predictions_of(right):
    return lambda folder: write_predictions(folder / "predictions.jsonl.gz", orig_records(right))


#: (what is wrong with NEW's folder, the file named, what the message says).
BROKEN = {
    "a summary that is a list": (lambda f: (f / "summary.json").write_text("[]"), "summary.json",
                                 "not a summary.json the gate wrote: a JSON list where an object is"),
    "a summary of no meta": (lambda f: (f / "summary.json").write_text('{"results": null}'), "summary.json",
                             "not a summary.json the gate wrote: no meta object"),
    "a summary nested 200,000 deep": (lambda f: (f / "summary.json").write_text("[" * 200_000 + "]" * 200_000),
                                      "summary.json", "arrays or objects nested over 64 deep"),
    "a predictions file of 0 bytes": (lambda f: (f / "predictions.jsonl.gz").write_bytes(b""), "predictions.jsonl.gz",
                                      "holds no prediction record"),
    "a NaN headline": (lambda f: _edit_summary(f, lambda s: s["families"][ORIG]["a"].update(acc=math.nan)),
                       "summary.json", "families.orig.a.acc is nan, not a number a summary holds"),
    "an infinite interval": (lambda f: _edit_summary(f, lambda s: s["families"][ORIG]["a"].update(
        acc_ci=[0.5, math.inf])), "summary.json", "families.orig.a.acc_ci.1 is inf"),
    "a headline that is text": (lambda f: _edit_summary(f, lambda s: s["families"][ORIG]["a"].update(acc="0.9")),
                                "summary.json", 'families.orig.a.acc is "0.9", not a number or null'),
    "a headline its predictions do not give": (
        lambda f: _edit_summary(f, lambda s: s["families"][ORIG]["a"].update(acc=0.95)), "summary.json",
        "families.orig.a.acc is 0.95 in the summary, 0.8 from the records"),
    "a row count its predictions do not give": (
        lambda f: _edit_summary(f, lambda s: s["families"][ORIG]["a"].update(n_rows=300)), "summary.json",
        "families.orig.a.n_rows is 300 in the summary, 30 from the records"),
    "a cell its predictions do not hold": (
        lambda f: _edit_summary(f, lambda s: s["families"][ORIG].update(c=s["families"][ORIG]["a"])), "summary.json",
        "families.orig.c is {"),
    "the predictions of another run": (_predictions_of({"a": 0.2, "b": 0.6}), "summary.json",
                                       "families.orig.a.acc is 0.8 in the summary, 0.2 from the records"),
}


@pytest.fixture
def folders(tmp_path):
    old = write_folder(tmp_path / "checkpoint-1", {"a": 0.8, "b": 0.6}, {"a": "pass", "b": "pass"})
    new = write_folder(tmp_path / "checkpoint-2", {"a": 0.8, "b": 0.6}, {"a": "pass", "b": "pass"})
    return old, new


def test_the_synthetic_folders_compare_and_trend_as_a_gate_runs_do(folders, capsys):
    old, new = folders
    assert main(["compare", str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("PASSED (exit 0)")
    assert main(["trend", str(old), str(new)]) == 0


@pytest.mark.parametrize("command", ["compare", "trend"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_report_folder_is_refused_naming_the_file_never_compared(folders, case, command, capsys):
    old, new = folders
    breaks, name, says = BROKEN[case]
    breaks(new)
    assert main([command, str(old), str(new)]) == 4
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {new / name}") or err.startswith(f"error: {new / 'summary.json'} does not hold "
                                                                    f"what {new / 'predictions.jsonl.gz'} gives")
    assert says in err and len(err.splitlines()) == 1 and "PASSED" not in out and "within noise" not in out


def test_a_summary_that_differs_from_its_predictions_names_both_files_and_how_to_make_it_again(folders, capsys):
    old, new = folders
    BROKEN["a headline its predictions do not give"][0](new)
    assert main(["compare", str(old), str(new)]) == 4
    summary, predictions = new / "summary.json", new / "predictions.jsonl.gz"
    assert capsys.readouterr().err == (
        f"error: {summary} does not hold what {predictions} gives: families.orig.a.acc is 0.95 in the summary, 0.8 "
        f"from the records; a summary is made from its predictions: give the folder a gate run wrote, or make its "
        f"summary again: python -m laya_robustness summarize {predictions} --out {summary}\n")


def test_a_checks_file_of_no_results_list_is_refused_by_compare(folders, capsys):
    old, new = folders
    (new / "checks.json").write_text('{"results": null}')
    assert main(["compare", str(old), str(new)]) == 4
    assert capsys.readouterr().err.startswith(f"error: {new / 'checks.json'}: not a checks.json the gate wrote: "
                                              "results is not a list of {family, dataset, check, decision} objects")


def test_the_command_exits_4_with_one_line_and_no_traceback(folders):
    old, new = folders
    (new / "summary.json").write_text("[" * 200_000 + "]" * 200_000)
    done = subprocess.run([sys.executable, "-m", "laya_robustness", "compare", str(old), str(new)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"error: {new / 'summary.json'}: not a summary.json the gate wrote")


def test_report_checks_the_summary_beside_the_predictions_and_a_baseline_summary(folders, tmp_path, capsys):
    old, new = folders
    BROKEN["a row count its predictions do not give"][0](new)
    assert main(["report", str(new / "predictions.jsonl.gz"), "--out", str(tmp_path / "out"), "--thresholds",
                 str(ROOT / "thresholds.toml")]) == 4
    assert "families.orig.a.n_rows is 300 in the summary, 30 from the records" in capsys.readouterr().err
    BROKEN["a NaN headline"][0](new)
    assert main(["report", str(old / "predictions.jsonl.gz"), "--baseline", str(new / "summary.json"), "--out",
                 str(tmp_path / "out"), "--thresholds", str(ROOT / "thresholds.toml")]) == 4
    assert capsys.readouterr().err.startswith(f"error: {new / 'summary.json'}: not a summary.json the gate wrote: "
                                              "families.orig.a.acc is nan")
    assert not (tmp_path / "out").exists()


def test_a_fifo_given_as_a_report_file_is_refused_not_read(folders, tmp_path, capsys):
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    assert main(["report", str(folders[0] / "predictions.jsonl.gz"), "--baseline", str(fifo), "--out",
                 str(tmp_path / "out")]) == 4
    assert capsys.readouterr().err.startswith(f"error: {fifo}: no such file, or not a regular file")
