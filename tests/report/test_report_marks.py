"""What the reports' marks mean: report.html's legend names every mark a table can show, "ok?" (undecided) and "n/a"
among them; summary.md counts the failed checks as the gate and the training callback count them, beside the
verdict line's count of cells."""

import html
import re

from laya_robustness.api import _failures
from laya_robustness.gate.results import CheckResult
from laya_robustness.gate.verdict import cell_verdict
from laya_robustness.report.build import build_report
from laya_robustness.report.cell_rows import MARKS, UNCHECKED, failed_checks_text
from laya_robustness.report.html import MEANINGS, render_html
from laya_robustness.report.markdown import render_markdown
from laya_robustness.run.gate_run import CellCheck

SUMMARY = {"meta": {"seed": 0, "rows_per_set": 0, "device": "cpu", "model": {"model": "fake-model"}}}
# one cell failing two checks, another failing one, a third whose known limitation is still borderline
RESULTS = [
    CheckResult("option_order", "colour_choice", "max_flip", False, 0.4, 0.1, None, "flip 0.4 > max_flip 0.1"),
    CheckResult("option_order", "colour_choice", "max_drop", False, 0.3, 0.05, None, "drop 0.3 > max_drop 0.05"),
    CheckResult("text", "colour_choice", "max_flip", False, 0.5, 0.1, None, "flip 0.5 > max_flip 0.1"),
    CheckResult("image", "colour_choice", "max_flip", True, 0.09, 0.1, None, "flip 0.09 against max_flip 0.1",
                decision="undecided"),
]


def test_the_html_legend_names_every_mark_with_its_meaning():
    page = render_html(build_report(SUMMARY, [], results=RESULTS))
    (legend,) = re.findall(r"Marks: (.*?)\.</p>", page, flags=re.S)
    for outcome, mark in [*MARKS.items(), (UNCHECKED, "-")]:
        assert f'<span class="tag {outcome}">{mark}</span> {html.escape(MEANINGS[outcome])}' in legend, (outcome, legend)
    assert '<span class="tag undecided">ok?</span> a check judged on its interval that the evidence decides neither ' \
           "way" in legend


def test_summary_md_counts_the_failed_checks_as_the_callback_does_beside_the_failed_cells():
    text = render_markdown(build_report(SUMMARY, [], results=RESULTS))
    assert "**Verdicts:** 2 FAIL, 0 XPASS, 0 xfail, 1 ok (cells with limits)" in text  # cells
    # what run_gate's failures hold, which the callback logs as robustness/failed_checks and shows as "N failed checks"
    callback = [f for cell in ("option_order", "text", "image")
                for f in _failures(CellCheck(cell, "colour_choice",
                                             cell_verdict([r for r in RESULTS if r.family == cell], lambda _: None),
                                             [], ()))]
    assert len(callback) == 3
    assert f"#### Failed checks\n\n{failed_checks_text(len(callback))} in 2 cells:\n\n- **FAIL**" in text
    assert failed_checks_text(3) == "3 failed checks" and failed_checks_text(1) == "1 failed check"
