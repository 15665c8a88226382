"""A run ends itself: ``GateRun.finish`` gives one ``RunOutcome`` that every adapter reads (``run_gate``'s
``GateResult``, the report writer, the pytest terminal), its exit status decided in one place; nothing outside
``run/gate_run.py`` reads or writes the run's state but through its methods."""

import ast
import json
from pathlib import Path

import pytest

import laya_robustness
from laya_robustness.report.folder import write_reports
from laya_robustness.run.errors import EXIT_HARNESS, EXIT_LIMIT_CROSSED, EXIT_USAGE
from laya_robustness.run.judged import NothingJudged
from laya_robustness.run.outcome import Ending, RunOutcome

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "laya_robustness"
SMALL = {"families": ["option_order"], "rows_per_set": 4, "invariance": False, "limitations": "none"}


@pytest.mark.parametrize(("ending", "errors", "status"), [
    (Ending(status=0), (), 0),
    (Ending(status=EXIT_LIMIT_CROSSED), (), EXIT_LIMIT_CROSSED),
    (Ending(status=0, nothing_judged=NothingJudged(EXIT_USAGE, "nothing")), (), EXIT_USAGE),
    (Ending(status=EXIT_LIMIT_CROSSED, nothing_judged=NothingJudged(EXIT_USAGE, "nothing")), ("broke",), EXIT_HARNESS),
    (Ending(status=2, ended="interrupted"), ("broke",), EXIT_HARNESS),
    (Ending(status=2, ended="interrupted"), (), 2),
])
def test_the_exit_status_is_decided_once_harness_errors_first_then_nothing_judged_then_the_callers(
        ending, errors, status):
    outcome = RunOutcome.decided(ending, reports={}, scopes={}, incomplete_reason=None, harness_errors=errors)
    assert outcome.exit_status == status
    later = RunOutcome.decided(ending, reports={}, scopes={}, incomplete_reason=None, harness_errors=())
    assert later.with_errors(["cannot write"]).exit_status == EXIT_HARNESS
    assert later.with_errors([]).exit_status == later.exit_status


def test_the_outcome_is_what_the_reports_hold_and_writes_the_same_bytes_anywhere(tmp_path):
    result = laya_robustness.run_gate(root=ROOT, report_dir=tmp_path / "run", **SMALL)
    outcome = result.outcome
    assert outcome.exit_status == result.exit_status and outcome.complete
    (device, report), = outcome.reports.items()
    assert report.folder == ""
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == json.loads(json.dumps(report.summary))
    assert json.loads((tmp_path / "run" / "checks.json").read_text()) == result.checks
    assert [r.row_id for r in report.records] == sorted(r.row_id for r in report.records)
    assert sorted(p.name for p in outcome.written) == sorted(
        ["summary.json", "checks.json", "predictions.jsonl.gz", "report.html", "summary.md"])
    # the outcome is a value: writing it again elsewhere gives the same data files, and changes nothing in it
    again = write_reports(outcome, tmp_path / "again")
    assert not again.errors and not again.kept_previous_report
    for name in ("summary.json", "checks.json", "predictions.jsonl.gz"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "run" / name).read_bytes()
    assert result.outcome is outcome and outcome.written[0].parent == tmp_path / "run"


def test_a_run_that_judged_nothing_ends_with_its_status_and_an_incomplete_report(tmp_path):
    result = laya_robustness.run_gate(root=ROOT, model=str(ROOT / "laya_fixtures" / "tiny-clip"),
                                      families=["option_order"], rows_per_set=2, invariance=False,
                                      report_dir=tmp_path / "run")
    assert result.exit_status == result.outcome.exit_status == EXIT_USAGE
    assert result.outcome.incomplete_reason == result.nothing_judged


def _state_attributes() -> set[str]:
    """The attributes ``GateRun`` keeps its state in: every ``self.<name> = ...`` of the class."""
    tree = ast.parse((PACKAGE / "run" / "gate_run.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GateRun")
    return {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name) and n.value.id == "self"}


def test_nothing_outside_the_run_reads_or_writes_its_state():
    state = _state_attributes()
    assert {"_held", "_settings", "_models", "_inputs"} <= state  # the check below looks for the right names
    reached = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "run" / "gate_run.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in state:
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
                if owner in ("run", "_run"):
                    reached.append(f"{path.relative_to(ROOT)}:{node.lineno} {owner}.{node.attr}")
    assert reached == []


def test_what_a_run_holds_is_read_only_where_the_run_hands_it():
    """``run.held.Held`` is made by the run and handed to its scoring (``run.planned``) and to the report maker
    (``run.outputs.data_files.device_reports``); no other module imports it."""
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if "laya_robustness.run.held" in p.read_text() and p.name != "held.py")
    assert importers == ["run/gate_run.py", "run/outputs/data_files.py"]
