"""Text from a model, a server or the data in the reports: summary.md's code spans hold any text (backticks, HTML,
line breaks) as one span a CommonMark parser reads back whole, report.html escapes every text and writes control
characters out, and a run of all rows says so ("all rows", not "rows per set 0")."""

import re

import pytest

from laya_robustness.report.build import Report
from laya_robustness.report.html import render_html, visible
from laya_robustness.report.markdown import code, render_markdown

markdown_it = pytest.importorskip("markdown_it")

ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
HOSTILE = ESCAPES + "m`</title><script>alert(1)</script>`x"


def report(model: str = "tiny", rows_per_set: int = 1) -> Report:
    meta = {"model": {"model": model}, "device": "cpu", "seed": 0, "rows_per_set": rows_per_set}
    return Report({"meta": meta}, {}, {}, {}, [], [])


def spans(line: str) -> tuple[list[str], list[str]]:
    """The code spans and the raw HTML a CommonMark parser finds in one line."""
    tokens = markdown_it.MarkdownIt("commonmark").parseInline(line)[0].children
    return ([t.content for t in tokens if t.type == "code_inline"],
            [t.content for t in tokens if t.type == "html_inline"])


@pytest.mark.parametrize("text", ["tiny", "a`b", "``x``", "`lead", "trail`", " both ", "a ``` b ` c", "<b>x</b>",
                                  HOSTILE, "line\nbreak\ttab", "`", "", "\u202eevil"])
def test_a_code_span_holds_any_text_as_one_span(text):
    shown = visible(text, lines=False) or " "
    found, html = spans(f"before {code(text)} after")
    assert found == [shown] and html == []


def test_summary_md_holds_a_hostile_model_id_in_its_code_span_with_no_escape_sequence():
    text = render_markdown(report(HOSTILE))
    head, = [line for line in text.splitlines() if line.startswith("### ")]
    assert "\x1b" not in text and "\x07" not in text
    assert spans(head) == ([HOSTILE.replace(ESCAPES, "\\x1b[2J\\x1b]0;pwned\\x07")], [])


def test_a_dataset_name_with_a_backtick_stays_in_its_span_in_the_failed_checks():
    from laya_robustness.gate.results import CheckResult
    from laya_robustness.report.cells import cell_verdicts

    result = CheckResult("text", "d`<i>x</i>", "max_flip", False, 0.3, 0.2, None, f"too many{ESCAPES}")
    verdicts = cell_verdicts([result], lambda *a: None)
    summary = {"meta": {"model": {"model": "tiny"}, "rows_per_set": 1}}
    text = render_markdown(Report(summary, verdicts, {}, {}, [], []))
    line, = [line for line in text.splitlines() if line.startswith("- **FAIL**")]
    assert spans(line) == (["text/d`<i>x</i>"], []) and "\\x1b[2J" in line and "\x1b" not in line


def test_report_html_escapes_the_title_and_writes_control_characters_out():
    page = render_html(report(HOSTILE))
    title = re.search("<title>(.*)</title>", page).group(1)
    assert title == ("Robustness report: \\x1b[2J\\x1b]0;pwned\\x07m`&lt;/title&gt;&lt;script&gt;alert(1)"
                     "&lt;/script&gt;`x")
    assert "\x1b" not in page and "\x07" not in page and "<script>" not in page


@pytest.mark.parametrize("rows_per_set, words", [(0, "all rows"), (8, "rows per set 8")])
def test_the_headline_says_all_rows_when_every_row_was_used(rows_per_set, words):
    markdown, page = render_markdown(report(rows_per_set=rows_per_set)), render_html(report(rows_per_set=rows_per_set))
    assert f"seed 0, {words})" in markdown and f"seed 0 · {words} · " in page
    assert "rows per set 0" not in markdown + page

