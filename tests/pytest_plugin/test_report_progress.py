"""Scoring progress (a line in a log, a bar on a terminal, quiet modes) and the gate's terminal summary and reports."""

import json

import pytest
import torch  # noqa: F401  (imported once here: pytester's in-process runs must not re-import it)

from laya_robustness.pytest_plugin.terminal import WIDTH, table_lines
from laya_robustness.pytest_plugin.progress import LineProgress, Quiet, scoring_progress
from laya_robustness.report.wrapping import unwrap

from helpers.gate_project import make_gate

pytest_plugins = ["pytester"]


def test_line_progress_says_rows_seconds_and_rate():
    lines = []
    clock = iter([10.0, 12.5]).__next__
    tracker = LineProgress(lines.append, "image/vsr (cpu)", 100, clock=clock)
    tracker.update(60)
    tracker.update(40)
    tracker.close()
    assert lines == ["scored image/vsr (cpu): 100 rows in 2.5 s, 40 rows/s"]
    assert "\r" not in lines[0]


class Config:
    def __init__(self, verbose=0, worker=False, tty=False):
        self.verbose = verbose
        if worker:
            self.workerinput = {"workerid": "gw0"}
        self.pluginmanager = self
        self.reporter = Reporter(tty)

    def getoption(self, name, default=None):
        return self.verbose if name == "verbose" else default

    def get_plugin(self, name):
        return self.reporter if name == "terminalreporter" else None


class Reporter:
    def __init__(self, tty):
        self.tty, self.lines, self.text = tty, [], ""

    def isatty(self):
        return self.tty

    def ensure_newline(self):
        pass

    def write_line(self, line):
        self.lines.append(line)

    def write(self, text, flush=False):
        self.text += text

    def flush(self):
        pass


def test_quiet_on_workers_under_q_and_at_default_verbosity():
    assert isinstance(scoring_progress(Config(worker=True, verbose=1), "cpu", "text/vsr", 5), Quiet)
    assert isinstance(scoring_progress(Config(verbose=-1), "cpu", "text/vsr", 5), Quiet)
    assert isinstance(scoring_progress(Config(verbose=0), "cpu", "text/vsr", 5), Quiet)
    assert isinstance(scoring_progress(Config(verbose=1), "cpu", "negation/colour_choice", 0), Quiet)


def test_with_v_a_log_gets_one_line_and_a_terminal_a_bar():
    config = Config(verbose=1)
    tracker = scoring_progress(config, "cpu", "text/vsr", 5)
    tracker.update(5)
    tracker.close()
    assert len(config.reporter.lines) == 1 and config.reporter.lines[0].startswith("scored text/vsr (cpu): 5 rows")
    tty = Config(tty=True, verbose=1)
    bar = scoring_progress(tty, "cuda", "text/vsr", 5)
    bar.update(5)
    bar.close()
    assert "scoring text/vsr (cuda)" in tty.reporter.text and "5/5" in tty.reporter.text
    assert "rows/s" in tty.reporter.text


# ------------------------------------------------------------------------------ the gate, end to end


LIMITS = """
version = 1
[families.orig]
min_acc = 0.3
[families.option_order]
max_flip = 0.01
max_drop = 0.5
[families.negation]
min_acc = 0.2
"""


@pytest.fixture
def gate(pytester, monkeypatch):
    return make_gate(pytester, monkeypatch, LIMITS)


def _run(pytester, *args):
    return pytester.runpytest("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml",
                              "-k", "not (snapshot or benchmark or invariance or gpu)", *args)


def test_gate_prints_progress_every_block_and_writes_the_reports(gate):
    result = _run(gate, "--families", "option_order,negation", "-v")
    out = result.stdout.str()
    # a log (not a terminal): one line per family and set, no carriage returns
    scored = [line for line in out.splitlines() if line.startswith("scored ")]
    assert sorted(s.split(":")[0] for s in scored) == sorted(
        f"scored {f}/{d} (cpu)" for f in ("orig", "option_order", "negation") for d in ("colour_choice", "exists_yesno")
        if not (f == "negation" and d == "colour_choice"))
    assert "\r" not in out
    # every block that ran, each cell with its numbers and its verdict; no line past the width
    result.stdout.fnmatch_lines(["*robustness gate (cpu)*", "[[]families[]]", "family*dataset*acc*checks",
                                 "orig*colour_choice*ok", "option_order*colour_choice*FAIL max_flip", "[[]form[]]",
                                 "negation*exists_yesno*", "verdicts: * FAIL*"])
    # the gate's section: from its title to pytest's next section rule (the short test summary, the
    # warnings: pytest's own lines, sized by pytest)
    table = out[out.index("robustness gate (cpu)"):].splitlines()
    end = next((i for i, line in enumerate(table) if line.startswith("==")), len(table))
    assert max(len(line) for line in table[:end] if not line.startswith("wrote ")) <= WIDTH
    page = (gate.path / "reports" / "report.html").read_text()
    assert 'class="tag fail"' in page and 'id="ex-option_order"' in page and "data:image/png" in page
    md = (gate.path / "reports" / "summary.md").read_text()
    assert "**FAIL** option_order/colour_choice max_flip" in md
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines(["reports in */reports/: *report.html, summary.md*"])


def _tail(result, lines: int) -> list[str]:
    """The last ``lines`` lines of the gate's own summary (wrapped lines joined back): up to pytest's short test
    summary (whose failure messages pytest prints in full where ``CI`` is set)."""
    out = result.stdout.str().split("short test summary info")[0]
    return unwrap(out.rstrip("\n").splitlines())[-lines:]


def test_without_v_the_run_ends_with_what_failed_and_the_verdict_counts(gate):
    result = _run(gate, "--families", "option_order,negation")
    out = result.stdout.str()
    assert "family  dataset" not in out and "[families]" not in out  # the tables are behind -v
    # pytest's progress stays one line per test file: no per-cell line breaks it, so no file is named twice
    assert not [line for line in result.stdout.lines if line.startswith("scored ")]
    named = [line.split()[0] for line in result.stdout.lines if line.startswith("robustness_tests/")]
    assert named and len(named) == len(set(named)), named
    tail = _tail(result, 15)
    verdict = next(i for i, line in enumerate(tail) if "robustness gate (cpu): verdict" in line)
    assert any(line.startswith("FAIL option_order/colour_choice max_flip: ") for line in tail[verdict:]), tail
    assert any(line.startswith("verdicts: ") and " FAIL" in line for line in tail[verdict:]), tail
    assert any(line.startswith("reports in ") for line in tail[:verdict]), tail


def test_gate_under_q_prints_no_progress(gate):
    result = _run(gate, "--families", "option_order", "-q")
    out = result.stdout.str()
    assert not [line for line in result.stdout.lines if line.startswith("scored ")]  # no progress line
    assert "reports in " not in out and "family  dataset" not in out
    result.stdout.fnmatch_lines(["*robustness gate (cpu): verdict*", "verdicts: *"])


def test_a_broken_report_is_a_harness_error_not_a_crash(gate, monkeypatch):
    import laya_robustness.report.folder as report

    def broken(*args, **kwargs):
        raise RuntimeError("cannot draw")

    monkeypatch.setattr(report, "render_report", broken)
    result = _run(gate, "--families", "option_order")
    assert result.ret == 3
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        "*HARNESS ERROR*writing report.html / summary.md for cpu failed: RuntimeError: cannot draw*"])
    assert json.loads((gate.path / "reports" / "summary.json").read_text())["families"]


def test_terminal_table_fits_with_long_verdicts():
    """Cells failing many checks still fit: the checks are counted instead of named."""
    cell = {"acc": 0.5, "acc_ci": [0.41234, 0.6], "delta": -0.25, "delta_ci": [-0.3, -0.2], "flip": 0.4, "ece": 0.2,
            "ece_ci": [0.1, 0.3]}
    summary = {"families": {f: {"a_rather_long_dataset_name": dict(cell)} for f in ("orig", "image", "text_only")}}
    results = [{"family": "image", "dataset": "a_rather_long_dataset_name", "check": c, "passed": False, "value": 1.0,
                "limit": 0.1, "interval": None, "detail": "", "device": "cpu"}
               for c in ("max_flip", "max_drop", "min_acc", "max_ece")]
    lines = table_lines(summary, results, "cpu", lambda *a: None)
    assert max(map(len, lines)) <= WIDTH
    assert any(line.startswith("image") and line.endswith("FAIL (4 checks)") for line in lines)
    assert any("0.500 [0.412, 0.600]" in line for line in lines)  # the headline intervals stay
