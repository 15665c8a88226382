"""Render a Report as a compact Markdown comment for a pull request: one table per block, what failed, what changed.

Its first line says what the run covered (the scope of its meta). Each block is a table with a row per
family and a column per dataset; a cell holds the block's headline numbers (3 d.p., no intervals) and its verdict. Failures and fixed known limitations are
listed below with their detail; the baseline comparison (``report.compare``) follows when given. A name from the
model, the server or the data stands in a code span that holds any text (``code``), and every text has its control
characters written out, so nothing a model id holds acts on the page or the terminal that shows it.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from laya_robustness.report.build import Report
from laya_robustness.report.cells import (
    FAIL,
    MARKS,
    NO_CHECK,
    UNCHECKED,
    XFAIL,
    XPASS,
    cell_rows,
    columns_of,
    families_of,
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


def _pipe(text: str) -> str:
    return visible(text, lines=False).replace("|", "\\|")


def code(text: Any) -> str:
    """``text`` as one inline code span whatever it holds (CommonMark): control characters and line breaks written
    out, fenced by one backtick more than its longest run of them, and padded with a space when it starts or ends
    with one (or with a space at both ends), so no backtick closes the span early and no markup inside it acts.

    >>> print(code("tiny"), code("a`b"), code("`x` </title>"))
    `tiny` ``a`b`` `` `x` </title> ``
    """
    text = visible(text, lines=False) or " "
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" or (text[0] == text[-1] == " " and text.strip()) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def block_table(report: Report, block: str) -> str:
    """Rows: families; columns: datasets; cells: ``acc / delta / flip ok``."""
    summary = report.summary
    columns = columns_of(summary, block)
    shown = {(r.family, r.dataset) for r in cell_rows(summary, report.verdicts, block)}
    datasets = sorted({d for _, d in shown})
    lines = [f"| family ({' / '.join(columns)}) | " + " | ".join(_pipe(d) for d in datasets) + " |",
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
        lines.append(f"| {_pipe(family)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _problems(report: Report) -> list[str]:
    out = []
    for status, family, dataset, c in problems(report.verdicts):
        extra = " (a known limitation that now passes: update the limits file)" if status == XPASS else ""
        out.append(f"- **{MARKS[status]}** {code(f'{family}/{dataset}')} {c.check}: {visible(c.detail, False)}{extra}")
    return out


def render_markdown(report: Report, changes: Sequence[str] = ()) -> str:
    """The comment as a string (see the module doc)."""
    meta = report.summary.get("meta") or {}
    head = visible(f"### Robustness gate: {code(model_name(report.summary))} (device {meta.get('device', '?')}, "
                   f"seed {meta.get('seed', '?')}, {rows_text(meta)})", lines=False)
    parts = [head, f"**Verdicts:** {verdict_line(report.verdicts)}"]
    covered = scope_line(report.summary)
    if covered:
        parts.insert(0, f"**Covered:** {visible(covered, False)}")
    parts += [f"> {visible(n, False)}" for n in [*report.notes, *probability_lines(report.summary)]]
    for block in summary_blocks(report.summary):
        parts.append(f"#### {block}\n\n{block_table(report, block)}")
    problems = _problems(report)
    known = sum(1 for v in report.verdicts.values() for c in v.checks if c.status == XFAIL)
    if problems or known:
        parts.append("#### Failed checks\n\n" + ("\n".join(problems) or "none")
                     + (f"\n\n{known} known limitation(s) still fail as declared (xfail)." if known else ""))
    if report.baseline is not None:
        parts.append("#### Against the baseline\n\n" + "\n".join(f"- {visible(c, False)}" for c in changes))
    return "\n\n".join(parts) + "\n"
