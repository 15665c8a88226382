"""Render a Report as one self-contained HTML page: tables, flipped examples, plots, invariance; no network.

Images are inlined as data: URIs (thumbnails: PNG, or JPEG where that is smaller), the CSS is inline
and the page has no script, so it opens the same from a mail attachment, a CI artifact or a disk. Every text is
escaped, its control characters written out (``visible``): a model id, an answer or a question holding an escape
sequence or markup shows as text.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import Any, Callable, Mapping, Sequence

from laya_robustness.answers import answer_of, is_correct, is_scored
from laya_robustness.families import FLAT, find_family
from laya_robustness.gate.results import NOT_APPLICABLE
from laya_robustness.records import OPEN, UNPARSED
from laya_robustness.report import plots
from laya_robustness.report.build import Report
from laya_robustness.report.cell_rows import (
    FAIL,
    MARKS,
    PASS,
    UNCHECKED,
    UNDECIDED,
    XFAIL,
    XPASS,
    CellVerdict,
    cell_rows,
    columns_of,
    delta_text,
    families_of,
    invariance_verdicts,
    probability_lines,
    summary_blocks,
    value_text,
    verdict_line,
)
from laya_robustness.report.curves import reliability, strength_curves
from laya_robustness.report.examples import HOW, Example, confidence

#: Thumbnails are at most this many pixels on their longest side.
THUMBNAIL_PX = 160
_PNG_LIMIT = 12_000  # bytes: a PNG larger than this is also tried as JPEG and the smaller kept
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Control characters (C0 but tab and newline, DEL, C1, the line and paragraph separators, the bidirectional
#: overrides and isolates): an escape sequence sets a terminal's title, a bidi override reorders the text around it.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_BREAK = re.compile(f"[\t\n{_CONTROL.pattern[1:-1]}]")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1400px;padding:0 20px 40px;
color:#1d1d1f}
h1{margin:18px 0 4px}h2{margin-top:34px;border-bottom:2px solid #ddd;padding-bottom:4px}h3{margin:22px 0 6px}
nav a{margin-right:14px}.muted{color:#666}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px}
table{border-collapse:collapse;margin:6px 0 12px;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 9px;text-align:left;vertical-align:top}
th{background:#f4f4f6;position:sticky;top:0}td.num{white-space:nowrap}
details summary{cursor:pointer;font-size:12px}
tr.fail td{background:#fdecec}tr.xfail td{background:#fff6e0}tr.xpass td{background:#f1e9fb}
.tag{display:inline-block;border-radius:3px;padding:0 5px;font-weight:600;font-size:12px}
.tag.pass{background:#dff3e3;color:#17652a}.tag.fail{background:#d93025;color:#fff}
.tag.xfail{background:#f6c342;color:#4a3500}.tag.xpass{background:#7b4bc4;color:#fff}
.tag.unchecked{background:#eee;color:#666}.tag.undecided{background:#e3eefb;color:#1a4f8b}
.tag.not.applicable{background:#eee;color:#666}
ul.checks{margin:2px 0 0;padding-left:16px;font-size:12px}ul.checks li.pass{color:#17652a}
ul.checks li.fail{color:#b00020}ul.checks li.xfail{color:#7a5a00}ul.checks li.xpass{color:#5b2d9e}
.examples{display:flex;flex-direction:column;gap:14px}
.example{border:1px solid #ddd;border-radius:6px;padding:8px 10px}
.example .head{font-weight:600;margin-bottom:6px}
.pair{display:flex;gap:12px;flex-wrap:wrap}
.side{flex:0 1 300px;margin:0;border-left:3px solid #ccc;padding-left:8px}
.side.orig{border-left-color:#2e7d32}.side.variant{border-left-color:#c62828}
.side img,.noimg{width:128px;height:auto;image-rendering:pixelated;border:1px solid #ccc;margin:0 6px 4px 0}
.noimg{display:inline-block;height:64px;line-height:64px;text-align:center;color:#888;font-size:12px}
.q{white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f7f7f9;
padding:3px 5px;margin:3px 0}
table.opts td{border:0;padding:1px 6px 1px 0;font-size:12.5px}
.bar{display:inline-block;height:9px;background:#4c72b0;vertical-align:middle}
.gold{color:#1b5e20;font-weight:600}.answer{outline:2px solid #c62828;outline-offset:-1px}
.answer.right{outline-color:#2e7d32}img.plot{max-width:100%;height:auto}
.scope{margin:10px 0 0;padding:6px 10px;border-left:4px solid #2e7d32;background:#eef7ef}
.scope.partial{border-left-color:#f0b400;background:#fff8e1}
"""


def visible(text: Any, lines: bool = True) -> str:
    """``text`` with its control characters written as Python escapes (``\\x1b``); tab and newline too unless
    ``lines``.

    >>> print(visible("tiny\\x1b]0;title\\x07"), visible("a\\nb", lines=False))
    tiny\\x1b]0;title\\x07 a\\nb
    """
    return (_CONTROL if lines else _CONTROL_OR_BREAK).sub(lambda m: ascii(m.group())[1:-1], str(text))


def e(text: Any) -> str:
    """``text`` for the page: control characters visible, then HTML-escaped (quotes too)."""
    return html.escape(visible(text), quote=True)


def thumbnail_uri(image, max_px: int = THUMBNAIL_PX) -> str:
    """A data: URI of the image scaled to at most ``max_px`` on its longest side (PNG, or JPEG if smaller)."""
    from PIL import Image

    image = image.convert("RGB")
    if max(image.size) > max_px:
        image = image.copy()
        image.thumbnail((max_px, max_px), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False, compress_level=9)
    data, mime = buf.getvalue(), "image/png"
    if len(data) > _PNG_LIMIT:
        jpg = io.BytesIO()
        image.save(jpg, format="JPEG", quality=80)
        if len(jpg.getvalue()) < len(data):
            data, mime = jpg.getvalue(), "image/jpeg"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _tag(outcome: str) -> str:
    text = "-" if outcome == UNCHECKED else MARKS[outcome]
    return f'<span class="tag {e(outcome)}">{e(text)}</span>'


#: What each mark of a cell or check means (the legend above the tables), in the order it is shown.
MEANINGS = {
    PASS: "every limit holds",
    FAIL: "a limit is crossed",
    XFAIL: "a declared known limitation still fails",
    XPASS: "a known limitation now passes (the limits file must be updated)",
    UNDECIDED: "a check judged on its interval that the evidence decides neither way: sampling noise could put it on "
               "either side of the limit (not a failure; more rows decide it)",
    NOT_APPLICABLE: "the run cannot have the check's statistic (e.g. max_ece of a generation-only scorer): it decides "
                    "nothing",
    UNCHECKED: "no limit was checked",
}


def legend() -> str:
    """Every mark the tables show with its meaning (``MEANINGS``), as HTML."""
    return ", ".join(f"{_tag(outcome)} {e(meaning)}" for outcome, meaning in MEANINGS.items())


def _check_item(c) -> str:
    why = f" — known limitation: {c.reason}" if c.reason else ""
    return f'<li class="{e(c.status)}"><b>{e(MARKS[c.status])}</b> {e(c.check)}: {e(c.detail)}{e(why)}</li>'


def _verdict_cell(v: CellVerdict) -> str:
    """The outcome, the checks that did not simply pass with their detail, the passed ones folded away."""
    shown = "".join(_check_item(c) for c in v.checks if c.status != PASS)
    passed = [c for c in v.checks if c.status == PASS]
    listing = f'<ul class="checks">{shown}</ul>' if shown else ""
    if passed:
        names = ", ".join(c.check for c in passed)
        listing += (f'<details><summary class="muted">passed: {e(names)}</summary><ul class="checks">'
                    f'{"".join(_check_item(c) for c in passed)}</ul></details>')
    return f'<td class="verdict">{_tag(v.outcome)}{listing}</td>'


def _block_title(block: str, families: Sequence[str]) -> str:
    if block == FLAT:
        return "Accuracy, paired delta vs orig, flip rate and ECE (the flat table)"
    return f"Block “{block}”: {', '.join(families)}"


def _cell_tables(report: Report) -> str:
    parts = []
    for block in summary_blocks(report.summary):
        columns = columns_of(report.summary, block)
        rows = cell_rows(report.summary, report.verdicts, block)
        head = "".join(f"<th>{e(k)}{' [95% CI]' if any(r.cell.get(f'{k}_ci') for r in rows) else ''}</th>"
                       for k in columns)
        body = []
        for r in rows:
            values = "".join(f'<td class="num">{e(value_text(r.cell, k, r.family))}</td>' for k in columns)
            n = r.cell.get("n_rows", r.cell.get("n"))
            body.append(f'<tr class="{e(r.verdict.outcome)}"><td>{e(r.family)}</td><td>{e(r.dataset)}</td>'
                        f"<td>{e(n if n is not None else '-')}</td>{values}{_verdict_cell(r.verdict)}</tr>")
        parts.append(f"<h3>{e(_block_title(block, families_of(report.summary, block)))}</h3>"
                     f"<table class=\"cells\"><thead><tr><th>family</th><th>dataset</th><th>rows</th>{head}"
                     f"<th>checks</th></tr></thead><tbody>{''.join(body)}</tbody></table>")
    return "".join(parts) or "<p>No cells.</p>"


def _options(row, record: Mapping[str, Any]) -> str:
    """The options as the model saw them, with each option's probability (where the scorer has them); gold and
    answer marked; a served model's generated text below them (``unparsed`` when it names no option)."""
    order = row.display_order if row.display_order is not None else range(len(row.options))
    lines = []
    for shown, i in enumerate(order):
        classes = []
        if i == record["argmax"]:
            classes.append("answer right" if i == record["label"] else "answer")
        gold = ' <span class="gold">gold</span>' if i == record["label"] else ""
        p = record["probs"][i] if record["probs"] else None
        bar = "-" if p is None else f'<span class="bar" style="width:{round(60 * p)}px"></span> {p:.3f}'
        lines.append(f'<tr class="{" ".join(classes)}"><td>{LETTERS[shown % 26]}.</td><td>{e(row.options[i])}</td>'
                     f'<td>{bar}</td><td>{gold}</td></tr>')
    if "raw_answer" in record:
        unparsed = " (unparsed)" if record.get("extraction") == UNPARSED else ""
        lines.append(f'<tr><td>text</td><td colspan="3">{e(repr(record["raw_answer"]))}{unparsed}</td></tr>')
    return f'<table class="opts">{"".join(lines)}</table>'


def _open_answer(record: Mapping[str, Any]) -> str:
    """An open-answer row's generated answer and the accepted ones."""
    accepted = ", ".join(record.get("answers") or []) or "-"
    return (f'<table class="opts"><tr class="answer{" right" if record.get("correct") else ""}"><td>answer</td>'
            f'<td>{e(record.get("raw_answer", record.get("answer", "")))}</td></tr>'
            f'<tr><td>accepted</td><td class="gold">{e(accepted)}</td></tr></table>')


def _side(record: Mapping[str, Any], row, kind: str, title: str) -> str:
    if row is None:
        body = '<div class="noimg">no data</div>'
        text = (f'<div class="muted">answer {e(answer_of(record))}, label {record["label"]}, '
                f'p = {", ".join(f"{p:.3f}" for p in record["probs"]) or "-"}</div>')
    else:
        imgs = "".join(f'<img src="{thumbnail_uri(im)}" alt="{e(kind)} image {i}">' for i, im in enumerate(row.images))
        body = imgs or '<div class="noimg">no image</div>'
        context = f'<div class="q">{e(row.context)}</div>' if row.context else ""
        answer = _open_answer(record) if record.get("primitive") == OPEN else _options(row, record)
        text = f'{context}<div class="q">{e(row.question)}</div>{answer}'
    right = ("right" if is_correct(record) else "wrong") if is_scored(record) else "no label"
    p_max = f', p<sub>max</sub> {confidence(record):.3f}' if record["probs"] else ""
    return (f'<figure class="side {e(kind)}"><figcaption><b>{e(title)}</b> <span class="muted">({right}{p_max})'
            f'</span></figcaption>{body}{text}</figure>')


def _example(ex: Example, rows: Mapping[str, Any]) -> str:
    sides = [_side(ex.orig, rows.get(ex.orig["row_id"]), "orig", "orig")]
    sides += [_side(r, rows.get(r["row_id"]), "variant", f"{ex.family}: {r['variant']}") for r in ex.variants]
    head = (f"{ex.dataset} · group {ex.group_id} · {ex.share:.0%} of the group's rows {ex.how} "
            f"({ex.n_rows} rows in {ex.family})")
    return f'<div class="example"><div class="head">{e(head)}</div><div class="pair">{"".join(sides)}</div></div>'


def _examples(report: Report) -> str:
    if not report.examples:
        return "<p>No row flipped.</p>"
    parts = []
    for family, examples in report.examples.items():
        decl = find_family(family)
        summary = decl.summary if decl else ""
        how = HOW[examples[0].how]
        parts.append(f'<h3 id="ex-{e(family)}">{e(family)} <span class="muted">— {e(summary)}; shown: {e(how)}'
                     f'</span></h3><div class="examples">{"".join(_example(x, report.rows) for x in examples)}</div>')
    return "".join(parts)


def _invariance(report: Report) -> str:
    conditions = (report.invariance or {}).get("conditions") or {}
    if not conditions:
        return "<p>No invariance conditions ran.</p>"
    verdicts = invariance_verdicts(report.verdicts)
    body = []
    for name, st in sorted(conditions.items()):
        v = verdicts.get(name, CellVerdict(UNCHECKED))
        body.append(f'<tr class="{e(v.outcome)}"><td>{e(name)}</td><td>{e(st.get("precision", "-"))}</td>'
                    f'<td>{e(st.get("rows", "-"))}</td><td>{e(st.get("flips", "-"))}</td>'
                    f'<td>{delta_text(st.get("max_abs_dp", 0))}</td><td>{delta_text(st.get("max_abs_dlogit", 0))}</td>'
                    f'<td>{"yes" if st.get("bitwise") else "no"}</td>{_verdict_cell(v)}</tr>')
    return ("<table><thead><tr><th>condition</th><th>precision</th><th>rows</th><th>flips</th><th>max |dp|</th>"
            f"<th>max |dlogit|</th><th>bitwise</th><th>checks</th></tr></thead><tbody>{''.join(body)}</tbody></table>")


#: report.html's plots, in page order.
PLOTS = ("reliability", "strength")


def plot_section(name: str, summary: Mapping[str, Any], curves: Sequence[Any]) -> str:
    """The HTML of report.html's plot ``name`` (``PLOTS``) drawn from its ``curves`` (``Report.reliability``,
    ``Report.strength``): a function of the run's summary and records alone, so any process holding them draws the
    same bytes (the SVG is byte-stable)."""
    if name == "reliability":
        return _plot(plots.reliability_uri, curves, "reliability diagrams",
                     "; ".join(probability_lines(summary)) or "No labelled rows.")
    return _plot(plots.strength_uri, curves, "accuracy and flip rate against strength",
                 "No family records a strength with at least two values.")


def plot_sections(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict:
    """``plot_section`` of each of ``names``, by name, drawn from a run's ``summary`` and ``records``."""
    curves = {"reliability": reliability, "strength": strength_curves}
    return {name: plot_section(name, summary, curves[name](records)) for name in names}


def _plot(draw, data, alt: str, empty: str) -> str:
    """``draw(data)`` as an inline image; a note instead when there is nothing to draw or no matplotlib."""
    try:
        uri = draw(data)
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        return '<p class="note">No plots: matplotlib is not installed (pip install "laya-robustness[report]").</p>'
    return f'<img class="plot" src="{uri}" alt="{e(alt)}">' if uri else f"<p>{e(empty)}</p>"


def _meta(summary: Mapping[str, Any]) -> str:
    meta = summary.get("meta") or {}
    rows = []
    for key in sorted(meta):
        value = meta[key]
        if isinstance(value, Mapping):
            value = ", ".join(f"{k}: {v}" for k, v in sorted(value.items()))
        rows.append(f"<tr><th>{e(key)}</th><td>{e(value)}</td></tr>")
    return f"<table>{''.join(rows)}</table>" if rows else "<p>No meta.</p>"


def model_name(summary: Mapping[str, Any]) -> str:
    model = (summary.get("meta") or {}).get("model")
    return str(model.get("model", "?")) if isinstance(model, Mapping) else str(model or "?")


def rows_text(meta: Mapping[str, Any]) -> str:
    """How many rows of each dataset the run used: ``rows per set 8``, or ``all rows`` (``rows_per_set`` 0).

    >>> rows_text({"rows_per_set": 0}), rows_text({"rows_per_set": 8}), rows_text({})
    ('all rows', 'rows per set 8', 'rows per set ?')
    """
    n = meta.get("rows_per_set", "?")
    return "all rows" if n == 0 and not isinstance(n, bool) else f"rows per set {n}"


def scope_line(summary: Mapping[str, Any]) -> str | None:
    """What the run covered (``meta.scope.covered``, see ``laya_robustness.run.scope``); None for a report of a run
    that did not record it."""
    scope = (summary.get("meta") or {}).get("scope")
    return scope.get("covered") if isinstance(scope, Mapping) else None


def render_html(report: Report, changes: Sequence[str] = (), drawn: Callable[[str], str | None] | None = None) -> str:
    """The whole page as a string (see the module doc); ``changes``: the baseline comparison in words; ``drawn(name)``:
    plot ``name``'s section (``plot_section``) where it was drawn elsewhere (another rank), else None."""
    drawn = drawn or (lambda name: None)
    meta = report.summary.get("meta") or {}
    title = f"Robustness report: {model_name(report.summary)}"
    scored = (meta.get("model") or {}).get("scored") if isinstance(meta.get("model"), Mapping) else None
    facts = " · ".join(str(x) for x in (
        f"device {meta.get('device', '?')}", f"seed {meta.get('seed', '?')}",
        rows_text(meta), f"{len(meta.get('datasets') or {})} datasets", scored and f"scored: {scored}") if x)
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in report.notes)
    covered, recorded = scope_line(report.summary), (report.summary.get("meta") or {}).get("scope") or {}
    scope = "" if covered is None else (f'<p class="scope {"complete" if recorded.get("complete") else "partial"}">'
                                        f'<b>Covered:</b> {e(covered)}</p>')
    changed = ("<h2 id=\"baseline\">Against the baseline</h2><ul>" + "".join(f"<li>{e(c)}</li>" for c in changes)
               + "</ul>") if report.baseline is not None else ""
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("cells", "families × sets"), ("examples", "flipped examples"), ("reliability", "reliability"),
        ("strength", "strength"), ("invariance", "invariance"), ("run", "run")))
    ex_nav = " · ".join(f'<a href="#ex-{e(f)}">{e(f)}</a>' for f in report.examples)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title><style>{CSS}</style></head>
<body>{scope}
<h1>{e(title)}</h1>
<p class="muted">{e(facts)}</p>
<p><b>Verdicts:</b> {e(verdict_line(report.verdicts))}</p>
<nav>{nav}</nav>
{notes}
{changed}
<h2 id="cells">Families × sets: numbers with 95% cluster-bootstrap intervals and the verdict of each check</h2>
<p class="muted">Rows: cells of family × dataset. Marks: {legend()}.</p>
{_cell_tables(report)}
<h2 id="examples">What broke: the worst flipped groups per family</h2>
<p class="muted">Per family, the group of each dataset with the largest share of flipped rows (ties: the most
confident wrong answer first), the orig row beside up to three of its flipped variants. Options are listed as the
model saw them with their calibrated probabilities; the outlined option is the model's answer (green when
right), “gold” the label.</p>
<p>{ex_nav}</p>
{_examples(report)}
<h2 id="reliability">Reliability per family</h2>
<p class="muted">Accuracy against confidence (max probability) in 15 equal-width bins, pooled over datasets;
the dotted diagonal is perfect calibration, the dark line the orig rows. A control such as image_shuffle
that stays confident while its accuracy falls shows how much of the confidence comes from the text alone.</p>
{drawn("reliability") or plot_section("reliability", report.summary, report.reliability)}
<h2 id="strength">Accuracy and flip rate against perturbation strength</h2>
<p class="muted">One panel per family and strength parameter read from the variants' meta (for example
<code>image_op</code>); solid: accuracy, dashed: flip rate, dotted: the same groups' orig accuracy.</p>
{drawn("strength") or plot_section("strength", report.summary, report.strength)}
<h2 id="invariance">Invariance</h2>
{_invariance(report)}
<h2 id="run">Run</h2>
{_meta(report.summary)}
</body></html>
"""
