"""Render a Report as a compact Markdown comment for a pull request: one table per block, what failed, what changed.

Its first line says what the run covered (the scope of its meta). Each block is a table with a row per
family and a column per dataset; a cell holds the block's headline numbers (3 d.p., no intervals) and its verdict. Failures and fixed known limitations are
listed below with their detail; the baseline comparison (``report.baseline_changes``) follows when given. Every text from the
model, the server or the data goes through ``md``, the one escaping of every markdown the project writes (this comment
and ``compare --markdown``): it shows as its own characters, never as markup, a link, HTML, a mention or a new line.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from laya_robustness.report.build import Report
from laya_robustness.report.cell_rows import (
    FAIL,
    MARKS,
    NO_CHECK,
    UNCHECKED,
    XFAIL,
    XPASS,
    cell_rows,
    columns_of,
    failed_checks_text,
    families_of,
    gate_failures,
    probability_lines,
    problems,
    value_text,
    verdict_line,
    summary_blocks,
)
from laya_robustness.report.html import model_name, rows_text, scope_line, visible


def _mark(outcome: str) -> str:
    if outcome == UNCHECKED:
        return ""
    text = MARKS[outcome]
    return f"**{text}**" if outcome in (FAIL, XPASS) else text


#: What markdown would read as markup: escaped by ``md`` (see there).
_MARKUP = re.compile(r"[\\`*~#$|!&<>\[\]@]|_(?![^\W_])|(?<![^\W_])_|(?<=:)/|(?<=:/)/|(?<=\bwww)\.", re.IGNORECASE)
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;", "@": "@\u200d"}
#: A list marker or thematic break the text starts with: escaped, as the text may start a list item.
_LEADING = re.compile(r"^(?:([-+])(?=[\s-]|$)|(\d{1,9})([.)])(?=\s|$))")
#: Spaces the text starts or ends with (an indented code block, a hard break, a trimmed table cell): as entities.
_END_SPACES = re.compile(r"^ +| +$")


def md(text: Any) -> str:
    """``text`` as plain markdown text that shows as its own characters (CommonMark, GitHub's GFM): control characters
    and line breaks written out (``visible``), HTML's ``& < >`` and link brackets as entities, ``@`` followed by a
    zero-width joiner (no mention, no mail link), ``://`` and ``www.`` escaped (no autolink), every other markup
    character (`` \\ ` * ~ # $ | ! ``, a ``_`` not between two letters or digits, a list marker the text starts with)
    escaped by a backslash, spaces at either end as entities. Used for every text from the model, a server or the
    data, in a table or out of one.

    >>> print(md("colour_choice"), md("a|b"), md("x` <!-- [y](z)"), md("1. _em_"))
    colour_choice a\\|b x\\` &lt;\\!-- &#91;y&#93;(z) 1\\. \\_em\\_
    >>> md("@all") == "@\\u200dall"
    True
    """
    escaped = _MARKUP.sub(lambda m: _ENTITIES.get(m.group(), "\\" + m.group()), visible(text, lines=False))
    escaped = _LEADING.sub(lambda m: f"\\{m.group(1)}" if m.group(1) else f"{m.group(2)}\\{m.group(3)}", escaped)
    return _END_SPACES.sub(lambda m: "&#32;" * len(m.group()), escaped)


def block_table(report: Report, block: str) -> str:
    """Rows: families; columns: datasets; cells: ``acc / delta / flip ok``."""
    summary = report.summary
    columns = columns_of(summary, block)
    shown = {(r.family, r.dataset) for r in cell_rows(summary, report.verdicts, block)}
    datasets = sorted({d for _, d in shown})
    lines = [f"| family ({md(' / '.join(columns))}) | " + " | ".join(md(d) for d in datasets) + " |",
             "|---" * (len(datasets) + 1) + "|"]
    for family in families_of(summary, block):
        cells = []
        for d in datasets:
            cell = summary[block][family].get(d) if (family, d) in shown else None
            if cell is None:
                cells.append("")
                continue
            values = " / ".join(value_text(cell, k, family, interval=False) for k in columns)
            mark = _mark(report.verdicts.get((family, d), NO_CHECK).outcome)
            cells.append(f"{values} {mark}".strip())
        lines.append(f"| {md(family)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _problems(report: Report) -> list[str]:
    out = []
    for status, family, dataset, c in problems(report.verdicts):
        extra = " (a known limitation that now passes: update the limits file)" if status == XPASS else ""
        out.append(f"- **{MARKS[status]}** {md(f'{family}/{dataset} {c.check}: {c.detail}')}{extra}")
    return out


def render_markdown(report: Report, changes: Sequence[str] = ()) -> str:
    """The comment as a string (see the module doc)."""
    meta = report.summary.get("meta") or {}
    head = "### Robustness gate: " + md(f"{model_name(report.summary)} (device {meta.get('device', '?')}, seed "
                                        f"{meta.get('seed', '?')}, {rows_text(meta)})")
    parts = [head, f"**Verdicts:** {verdict_line(report.verdicts)}"]
    covered = scope_line(report.summary)
    if covered:
        parts.insert(0, f"**Covered:** {md(covered)}")
    parts += [f"> {md(n)}" for n in [*report.notes, *probability_lines(report.summary)]]
    for block in summary_blocks(report.summary):
        parts.append(f"#### {md(block)}\n\n{block_table(report, block)}")
    problems = _problems(report)
    known = sum(1 for v in report.verdicts.values() for c in v.checks if c.status == XFAIL)
    if problems or known:
        failed = gate_failures(report.verdicts)
        cells = len({(family, dataset) for family, dataset, _ in failed})
        count = f"{failed_checks_text(len(failed))} in {cells} cell{'' if cells == 1 else 's'}:\n\n" if failed else ""
        parts.append("#### Failed checks\n\n" + count + ("\n".join(problems) or "none")
                     + (f"\n\n{known} known limitation(s) still fail as declared (xfail)." if known else ""))
    if report.baseline is not None:
        parts.append("#### Against the baseline\n\n" + "\n".join(f"- {md(c)}" for c in changes))
    return "\n\n".join(parts) + "\n"
