"""Text from a model, a server or the data in the reports: every markdown the project writes (summary.md, ``compare
--markdown``) shows any text (backticks, pipes, HTML, links, mentions, line breaks) as its own characters through
``report.markdown.md``, which a CommonMark parser with GFM tables reads back as that text alone, in a line, a list
item or a table cell; report.html escapes every text and writes control characters out, and a run of all rows says
so ("all rows", not "rows per set 0")."""

import re
from html import escape

import pytest

from laya_robustness.report.build import Report
from laya_robustness.report.html import render_html, visible
from laya_robustness.report.markdown import md, render_markdown

markdown_it = pytest.importorskip("markdown_it")

ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
HOSTILE = ESCAPES + "m`</title><script>alert(1)</script>`x"
#: A name that closes a code span, adds a table column, links, mentions, and hides the rest of a GitHub comment.
PR_HOSTILE = "x` | <img src=x onerror=alert(1)> [pwn](https://evil.example) @everyone <!--"
#: What markup a rendering of data may hold: none (a tag, a comment, a link, an image, emphasis, code, a heading...).
MARKUP = re.compile(r"<(?!/?(p|table|thead|tbody|tr|th|td|ul|li)>)|<!--")


def report(model: str = "tiny", rows_per_set: int = 1) -> Report:
    meta = {"model": {"model": model}, "device": "cpu", "seed": 0, "rows_per_set": rows_per_set}
    return Report({"meta": meta}, {}, {}, {}, [], [])


def parser():
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])


def inline_texts(source: str) -> list[str]:
    """The text of each inline run (a paragraph, a list item, a table cell) of ``source``; a token of another kind
    than text (code, HTML, a link, emphasis, a break) fails."""
    out = []
    for token in parser().parse(source):
        if token.type == "inline":
            assert {c.type for c in token.children} <= {"text"}, token.children
            out.append("".join(c.content for c in token.children))
    return out


def shown(text: str) -> str:
    """What ``md(text)`` shows: the text with its control characters written out, a zero-width joiner after ``@``."""
    return visible(text, lines=False).replace("@", "@\u200d")


TEXTS = ["tiny", "colour_choice", "a`b", "``x``", "`lead", "trail`", " both ", "a ``` b ` c", "<b>x</b>", HOSTILE,
         PR_HOSTILE, "line\nbreak\ttab", "`", "\u202eevil", "a|b", "- item", "+ item", "1. one", "2) two", "# h",
         "> quote", "***", "---", "___", "_em_", "*em*", "__b__", "~~s~~", "~~~", "[l](u)", "![i](u)", "[r]: u", "<!--",
         "<http://x>", "https://evil.example", "www.evil.example", "a@b.example", "@everyone", "&amp; &#64;", "\\",
         "back\\", "$x$", "\\*", "a_b_c", "snake__case", "x_", "_x", "1.5b-model", "    indented"]


@pytest.mark.parametrize("text", TEXTS)
def test_md_shows_any_text_as_itself_in_a_line_a_list_item_and_a_table_cell(text):
    escaped = md(text)
    assert "\n" not in escaped and "@everyone" not in escaped and "](" not in escaped
    assert not re.search("<[a-z!/]", escaped)
    assert inline_texts(f"before {escaped} after") == [f"before {shown(text)} after"]
    assert inline_texts(f"- {escaped} after") == [f"{shown(text)} after"]
    assert inline_texts(f"| a | b |\n|---|---|\n| {escaped} | after |\n") == ["a", "b", shown(text), "after"]
    html = parser().render(f"- {escaped}\n\n| {escaped} | b |\n|---|---|\n| {escaped} | c |\n")
    assert not MARKUP.search(html), html


def test_summary_md_shows_a_hostile_model_id_as_text_with_no_escape_sequence():
    text = render_markdown(report(HOSTILE))
    head, = [line for line in text.splitlines() if line.startswith("### ")]
    assert "\x1b" not in text and "\x07" not in text
    assert inline_texts(head) == [f"Robustness gate: {shown(HOSTILE)} (device cpu, seed 0, rows per set 1)"]


def test_a_hostile_dataset_name_stays_text_in_the_failed_checks():
    from laya_robustness.gate.results import CheckResult
    from laya_robustness.report.cell_rows import cell_verdicts

    result = CheckResult("text", "d`<i>x</i>", "max_flip", False, 0.3, 0.2, None, f"too many{ESCAPES}")
    verdicts = cell_verdicts([result], lambda *a: None)
    summary = {"meta": {"model": {"model": "tiny"}, "rows_per_set": 1}}
    text = render_markdown(Report(summary, verdicts, {}, {}, [], []))
    line, = [line for line in text.splitlines() if line.startswith("- **FAIL**")]
    (item,) = markdown_it.MarkdownIt("commonmark").parse(line)[3].children[4:]  # after "**FAIL** "
    assert item.type == "text" and item.content == " text/d`<i>x</i> max_flip: too many\\x1b[2J\\x1b]0;pwned\\x07"
    assert "\x1b" not in line


def _table(html_tokens) -> list[list[str]]:
    """The rows of the first table of parsed tokens, each as its cells' text."""
    rows, row, inside = [], None, False
    for token in html_tokens:
        if token.type == "table_close":
            break
        if token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append("".join(c.content for c in token.children))
        elif token.type == "tr_close":
            rows.append(row)
            row = None
    return rows


def test_compare_markdown_shows_a_hostile_dataset_as_text_in_a_row_of_its_columns_and_every_later_row(tmp_path,
                                                                                                       capsys):
    from laya_robustness.__main__ import main
    from helpers.report_folders import write_folder

    names = ["plain", PR_HOSTILE, "zz_later"]
    old = write_folder(tmp_path / "old", dict.fromkeys(names, 1.0), dict.fromkeys(names, "pass"), model=PR_HOSTILE)
    new = write_folder(tmp_path / "new", {"plain": 0.5, PR_HOSTILE: 0.0, "zz_later": 0.0},
                       dict.fromkeys(names, "fail"), model=PR_HOSTILE)
    assert main(["compare", str(old), str(new), "--markdown"]) == 1
    text = capsys.readouterr().out
    own = re.sub(r"</?(details|summary)>", "", text)  # the comment's own folds: the only tags it writes
    assert "](" not in own and "<!--" not in own and "@everyone" not in own and not re.search("<[a-z!/]", own)
    row, = [line for line in text.splitlines() if "img src" in line and line.startswith("| ")]
    assert len(re.findall(r"(?<!\\)\|", row)) == 6  # five columns
    html = parser().render(text)
    assert not re.search(r"<(img|a|script)\b|<!--", html), html
    rows = _table(parser().parse(text))
    assert len(rows) == 4 and all(len(r) == 5 for r in rows)  # the header and the three moves beyond noise
    assert sorted(r[0] for r in rows[1:]) == sorted(f"orig/{shown(n)}" for n in names)
    items = re.findall("<li>(.*)</li>", html)  # the family's regression, then every check now failing, the last too
    assert items[0].startswith("<strong>orig</strong> (all datasets) max_regression: acc change vs the baseline")
    assert items[1:] == [f"check orig/{escape(shown(n), quote=False)} min_acc: pass -&gt; <strong>fail</strong>"
                         for n in names]


def test_summary_md_table_keeps_its_columns_with_a_hostile_dataset_and_model(tmp_path):
    from laya_robustness.report.render import render_report
    from laya_robustness.summary import summarize
    from helpers.report_folders import orig_records

    recs = orig_records({"plain": 1.0, PR_HOSTILE: 0.5, "zz_later": 0.0})
    meta = {"model": {"model": PR_HOSTILE}, "device": "cpu", "seed": 0, "rows_per_set": 0}
    _, text = render_report(summarize(recs, meta, n_boot=20, n_boot_ece=10), recs)
    assert "](" not in text and "<!--" not in text and "@everyone" not in text and not re.search("<[a-z!/]", text)
    header, = [line for line in text.splitlines() if line.startswith("| family")]
    assert len(re.findall(r"(?<!\\)\|", header)) == 5  # family and three datasets
    html = parser().render(text)
    assert not re.search(r"<(img|a|script)\b|<!--", html), html
    rows = _table(parser().parse(text))
    assert rows[0][1:] == ["plain", shown(PR_HOSTILE), "zz_later"] and all(len(r) == 4 for r in rows)
    assert rows[-1][0] == "orig" and rows[-1][3].startswith("0.000")  # the row after the hostile column, whole


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

