"""``python -m laya_robustness compare OLD NEW``: what moved beyond noise between two runs' reports, as text or as a
pull request comment, with the gate's exit status; the numbers recomputed from the records."""

import re
from pathlib import Path

import pytest
import yaml

import laya_robustness
from laya_robustness.answers import is_correct, is_scored
from laya_robustness.__main__ import main, parser
from laya_robustness.metrics.baseline import mcnemar_p
from laya_robustness.report.compare import compare, markdown, read_report

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"families": ["option_order", "image"], "rows_per_set": 8, "invariance": False, "limitations": "none",
         "root": ROOT}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Reports of the embedded checkpoint (twice), of the other trained one, and of the embedded one under
    another seed."""
    base = tmp_path_factory.mktemp("compare")
    laya_robustness.run_gate(report_dir=base / "old", **SMALL)
    laya_robustness.run_gate(report_dir=base / "again", **SMALL)
    laya_robustness.run_gate(str(ROOT / "laya_fixtures" / "tiny-smolvlm-seed2"), report_dir=base / "new", **SMALL)
    laya_robustness.run_gate(report_dir=base / "seed1", **{**SMALL, "seed": 1})
    return base


def test_the_same_run_twice_moves_nothing_and_passes(reports):
    comparison = compare(read_report(reports / "old"), read_report(reports / "again"))
    assert comparison.status == 0 and comparison.moves == [] and comparison.verdicts == []
    assert comparison.verdict().startswith("PASSED (exit 0)")


def _counts(old, new, family, dataset=None):
    """(worse, better, matched) accuracy rows of ``family`` (one dataset, or all), recomputed from the records."""
    before = {(r["dataset"], r["row_id"]): r for r in old.records}
    pairs = [(r, before[(r["dataset"], r["row_id"])]) for r in new.records if r["family"] == family
             and dataset in (None, r["dataset"]) and (r["dataset"], r["row_id"]) in before]
    scored = [(r, s) for r, s in pairs if is_scored(r) and is_scored(s)]
    return (sum(1 for r, s in scored if is_correct(s) and not is_correct(r)),
            sum(1 for r, s in scored if is_correct(r) and not is_correct(s)), len(scored))


def test_each_move_agrees_with_the_values_and_the_paired_test_recomputed_from_the_records(reports):
    old, new = read_report(reports / "old"), read_report(reports / "new")
    comparison = compare(old, new)
    assert comparison.moves, "the other checkpoint moves some headline"
    judged = comparison.judged
    assert judged.moves_level == pytest.approx(0.05 / judged.moves) and judged.moves == len(judged.calls)
    for move in comparison.moves:
        if move.paired is None:
            assert move.beyond == (bool(move.interval) and not move.interval[0] <= move.new <= move.interval[1])
            continue
        call, (low, high) = move.paired, move.paired.interval
        assert call.level == judged.moves_level and low <= call.diff <= high
        if move.metric == "acc":
            family, dataset = move.cell.split("/")
            worse, better, n = _counts(old, new, family, dataset)
            assert call.p == pytest.approx(mcnemar_p(worse, better), abs=1e-6)  # as summary.json rounds it
            if call.method == "exact McNemar":  # few changed rows: the rows' change, its interval and test agree
                assert call.diff == pytest.approx((better - worse) / n)
                assert move.beyond == (low > 0 or high < 0) == (call.p < call.level)
            else:  # the same rows: the paired change is the change of the values
                assert call.diff == pytest.approx(move.new - move.old, abs=1e-9)
                assert move.beyond == ((low > 0 or high < 0) and call.p < call.level)
    # beyond noise first; a dataset's move is never a regression: only a family's, or a check now failing
    ranks = [not m.beyond for m in comparison.moves]
    assert ranks == sorted(ranks)
    assert comparison.regressions == len(comparison.regressed) + len(comparison.now_failing)
    assert comparison.status == (1 if comparison.regressions else 0)
    for r in comparison.judged.results:  # each family over all its datasets, at the pair's level
        assert r.dataset == "all" and f"at level {judged.level:.3g}" in r.detail
        if r.check == "max_regression":
            worse, better, n = _counts(old, new, r.family)
            assert f"McNemar p={mcnemar_p(worse, better):.3g}" in r.detail


def test_runs_that_differ_in_configuration_are_not_comparable_naming_what_differs(reports, capsys):
    comparison = compare(read_report(reports / "old"), read_report(reports / "seed1"))
    assert comparison.status == 4
    assert any(line.startswith("seed differs (0 in OLD, 1 in NEW)") for line in comparison.not_comparable)
    assert any(line.startswith("data_fingerprint differs") for line in comparison.not_comparable)
    assert main(["compare", str(reports / "old"), str(reports / "seed1")]) == 4
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("NOT COMPARABLE (exit 4): ") and "seed differs (0 in OLD, 1 in NEW)" in out[-1]


def test_the_command_prints_text_or_markdown_writes_the_comment_and_exits_as_the_gate(reports, tmp_path, capsys):
    status = main(["compare", str(reports / "old"), str(reports / "new"), "--markdown", "--out",
                   str(tmp_path / "comment.md")])
    out = capsys.readouterr().out
    comparison = compare(read_report(reports / "old"), read_report(reports / "new"))
    assert status == comparison.status
    assert out.rstrip("\n") == markdown(comparison).rstrip("\n") == (tmp_path / "comment.md").read_text().rstrip("\n")
    assert out.startswith("## Robustness gate: NEW against OLD")
    beyond = [m for m in comparison.moves if m.beyond]
    assert len(re.findall(r"^\| \w+/\w+ \|", out, re.MULTILINE)) == len(beyond)
    # the regressions before anything folded; the level and the number of headlines it covers said
    assert f"over {comparison.judged.headlines} family headline(s)" in out
    folded = out.index("<details>") if "<details>" in out else len(out)
    assert all(out.index(f"**{r.family}**") < folded for r in comparison.regressed)
    assert main(["compare", str(reports / "old"), str(reports / "new")]) == status
    text = capsys.readouterr().out.splitlines()
    assert text[-1] == comparison.verdict()  # the verdict is the last line


def test_a_folder_without_reports_is_a_usage_error_naming_it(tmp_path, capsys):
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 4
    assert f"{tmp_path}: no summary.json, checks.json, predictions.jsonl.gz" in capsys.readouterr().err


def test_the_ci_job_of_the_docs_parses_and_runs_the_command_as_declared():
    page = (ROOT / "docs" / "new-checkpoint.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    job = yaml.safe_load(block)
    steps = [step for j in job["jobs"].values() for step in j["steps"]]
    runs = [line.strip() for step in steps for line in step.get("run", "").splitlines()]
    (command,) = [line for line in runs if line.startswith("python -m laya_robustness compare")]
    args = parser().parse_args(command.split()[3:])
    assert args.run.__name__ == "_compare" and args.out is not None
    # the comment step posts the file the command writes
    assert any(str(args.out) in str(step.get("with", {})) for step in steps)


# ------------------------------------------------------------------------------ an honest trend


def test_trend_refuses_checkpoints_of_another_configuration_unless_mixed(reports, capsys):
    from laya_robustness.report.trend import read_checkpoints, trend_rows

    with pytest.raises(ValueError, match=r"\(OLD\) and .*seed1 \(NEW\) are not runs of one configuration: .*seed "
                                         r"differs \(0 in OLD, 1 in NEW\)"):
        read_checkpoints([reports / "old", reports / "seed1"])
    assert main(["trend", str(reports / "old"), str(reports / "seed1")]) == 4
    assert "pass --mix" in capsys.readouterr().err
    # mixed: other rows, so no paired change where the rows differ, and none that contradicts the values
    mixed = trend_rows(read_checkpoints([reports / "old", reports / "seed1"], mix=True))
    assert all(r["changes"][0] is None for r in mixed), [r for r in mixed if r["changes"][0]]
    assert main(["trend", str(reports / "old"), str(reports / "seed1"), "--mix"]) == 0


def test_each_paired_change_of_the_trend_agrees_with_the_values_it_sits_between(reports):
    from laya_robustness.report.trend import read_checkpoints, trend_rows

    checkpoints = read_checkpoints([reports / "old", reports / "new"])
    rows = trend_rows(checkpoints)
    changed = [r for r in rows if r["changes"][0] is not None]
    assert changed
    old, new = (c.report for c in checkpoints)
    for r in changed:
        (was, _), (now, _) = r["values"]
        change = r["changes"][0]
        low, high = change["ci"]
        assert low <= change["diff"] <= high
        if r["metric"] == "acc" and change["method"] == "exact McNemar":  # few rows changed: the rows' change
            worse, better, n = _counts(old, new, r["family"], r["dataset"])
            assert change["diff"] == pytest.approx((better - worse) / n), r
            assert change["beyond_noise"] == (low > 0 or high < 0)
        elif r["metric"] == "acc":
            assert change["diff"] == pytest.approx(now - was, abs=1e-9), r
    # the same call as compare makes of the pair
    calls = compare(read_report(reports / "old"), read_report(reports / "new")).judged.calls
    assert {(r["family"], r["dataset"], r["metric"]): r["changes"][0]["beyond_noise"] for r in changed} == \
        {key: calls[key].beyond for key in ((r["family"], r["dataset"], r["metric"]) for r in changed)}


def test_an_incomplete_checkpoint_is_marked_and_its_unjudged_cells_show_no_value(reports, tmp_path):
    import subprocess
    import sys

    from laya_robustness.report.trend import read_checkpoints, trend_rows, trend_table

    folder = tmp_path / "checkpoint-8"
    run = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-q", "-p", "no:randomly", "-p",
                          "no:cacheprovider", "--families", "option_order,image", "--rows-per-set", "8",
                          "--limitations", "none", "-k", "option_order and not (snapshot or benchmark or gpu)",
                          "--report-dir", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stdout[-2000:]
    checkpoints = read_checkpoints([reports / "old", folder])
    later = checkpoints[1]
    assert not later.complete and ("image", "colour_choice") in later.not_judged
    rows = trend_rows(checkpoints)
    for r in rows:
        if (r["family"], r["dataset"]) in later.not_judged:
            assert r["values"][1] is None and r["changes"][0] is None, r
    assert any(r["family"] == "option_order" and r["values"][1] is not None for r in rows)
    table = trend_table(checkpoints)
    assert "step 1 (incomplete)" in table[0]
    assert table[-1].startswith("(incomplete): ")


def test_two_runs_of_one_lora_training_compare_and_runs_of_other_adapters_do_not():
    from laya_robustness.report.compare import configuration_differences

    def meta(r: int, adapter_weights: str) -> dict:
        return {"model": {"model": "base", "weights_sha256": {"tensors": adapter_weights + "t", "base": "b",
                                                              "adapter": adapter_weights},
                          "adapters": {"default": {"kind": "LORA", "base_model": "base", "r": r}}}}

    assert configuration_differences(meta(4, "step-2"), meta(4, "step-4")) == []  # the adapters' weights moved
    assert configuration_differences(meta(4, "step-2"), meta(8, "step-4")) == [
        "the model's adapters differs ({'default': {'kind': 'LORA', 'base_model': 'base', 'r': 4}} in OLD, "
        "{'default': {'kind': 'LORA', 'base_model': 'base', 'r': 8}} in NEW)"]


def test_a_known_limitation_that_fails_is_no_regression_a_check_that_fails_is(reports):
    """The gate counts a known limitation's failure as expected (xfail): compare does too. The same run's checks
    edited so one check goes undecided -> fail: known, no regression (exit 0); not known, a regression (exit 1)."""
    import dataclasses

    from laya_robustness.report.compare import verdict

    old, again = read_report(reports / "old"), read_report(reports / "again")
    first = dict(old.results[0])
    for known, status in ((True, 0), (False, 1)):
        before = [dict(first, decision="undecided", known=known)] + [dict(r) for r in old.results[1:]]
        after = [dict(first, decision="fail", known=known)] + [dict(r) for r in again.results[1:]]
        comparison = compare(dataclasses.replace(old, results=before), dataclasses.replace(again, results=after))
        assert comparison.status == status, comparison.verdict()
        assert (comparison.now_failing != []) is (not known)
        assert comparison.verdicts[0][2] == ("expected" if known else "fail")
    assert verdict({"decision": "pass", "known": True}) == "xpass"
