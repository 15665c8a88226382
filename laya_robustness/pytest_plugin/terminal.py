"""The terminal header and summary: per summary block, one row per (family, dataset) with its headline numbers
and checks, and the language-model tokens the scorers computed.

Every block of the summary appears (the flat table and every extension block), its columns and
families derived from the declarations (``laya_robustness.report.cells``). Tables fit in ``WIDTH``
columns: a row whose checks do not fit says how many checks decided it instead of naming them,
and a block that still does not fit drops its intervals.
"""

from __future__ import annotations

from laya_robustness.report.cells import (
    MARKS,
    NO_CHECK,
    UNCHECKED,
    cell_rows,
    cell_verdicts,
    columns_of,
    delta_text,
    invariance_verdicts,
    probability_lines,
    summary_blocks,
    text_rows,
    verdict_line,
)
from laya_robustness.run.models import model_type
from laya_robustness.scoring.adapters import adapter_class

WIDTH = 120


def render(rows: list[list[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _short(verdict) -> str:
    deciding = verdict.deciding()
    return f"{MARKS[verdict.outcome]} ({len(deciding)} checks)" if len(deciding) > 1 else verdict.short()


def block_lines(summary: dict, verdicts: dict, block: str, width: int = WIDTH) -> list[str]:
    """One block as a table no wider than ``width`` where the names allow it (see the module doc).

    Tried in turn: intervals on every column, on the headline columns only (not ECE), none; each with
    the deciding checks named, then counted.
    """
    rows, columns = cell_rows(summary, verdicts, block), columns_of(summary, block)
    headline = [k for k in columns if k != "ece"]
    for intervals in (columns, headline, ()):
        table = text_rows(rows, columns, intervals)
        lines = render(table)
        if max(map(len, lines)) <= width:
            return lines
        table = [table[0]] + [t[:-1] + [_short(r.verdict)] for t, r in zip(table[1:], rows)]
        lines = render(table)
        if max(map(len, lines)) <= width:
            return lines
    return lines


def table_lines(summary: dict, results: list[dict], device: str, known, width: int = WIDTH) -> list[str]:
    """Every block of one device's summary, each under a ``[block]`` heading, then the verdict counts.

    ``known(family, dataset, check)`` returns a declared known limitation (anything with a ``reason``) or None.
    """
    verdicts = _verdicts(results, device, known)
    lines: list[str] = []
    for block in summary_blocks(summary):
        lines += [f"[{block}]", *block_lines(summary, verdicts, block, width), ""]
    return lines + probability_lines(summary) + [f"verdicts: {verdict_line(verdicts)}"]


def _verdicts(results: list[dict], device: str, known) -> dict:
    def reason(family: str, dataset: str, check: str) -> str | None:
        hit = known(family, dataset, check)
        return None if hit is None else getattr(hit, "reason", str(hit))

    return cell_verdicts([r for r in results if r.get("device", device) == device], reason)


def power_lines(results: list[dict]) -> list[str]:
    """The interval-judged checks whose sets are too small to tell a 5-point change from none."""
    lines = []
    for r in results:
        needed, have = r.get("rows_needed"), r.get("n_rows_have")
        if needed and have and needed > have:
            lines.append(f"{r['family']}/{r['dataset']} {r['check']}: needs about {needed} rows per set, has {have}")
    return sorted(set(lines))


def invariance_lines(conditions: dict, verdicts: dict | None = None) -> list[str]:
    """One line per condition: precision, max |dp|, max |dlogit|, flips / rows, bitwise, checks."""
    verdicts = verdicts or {}
    rows = [["condition", "precision", "max |dp|", "max |dlogit|", "flips / rows", "bitwise", "checks"]]
    for name, st in sorted(conditions.items()):
        v = verdicts.get(name, NO_CHECK)
        rows.append([name, st["precision"], delta_text(st["max_abs_dp"]), delta_text(st["max_abs_dlogit"]),
                     f"{st['flips']} / {st['rows']}", "yes" if st["bitwise"] else "no",
                     "-" if v.outcome == UNCHECKED else v.short()])
    return render(rows)


def scope_lines(scopes: dict) -> list[tuple[str, bool]]:
    """``(line, complete)`` per device: what its report covers (``laya_robustness.run.scope``)."""
    return [(f"laya-robustness covered ({device}): {scope.covered}", scope.complete)
            for device, scope in sorted(scopes.items())]
def prefix_sharing_line(settings) -> str | None:
    """How the hf scorer will share the model's image prefixes (read from its config before it loads), or None for
    a plug-in scorer or an architecture without an adapter."""
    kind = model_type(settings.model) if settings.scorer == "hf" else None
    adapter = adapter_class(kind) if kind else None
    if adapter is None:
        return None
    how = adapter.prefix_sharing() if settings.prefix_cache_mb else "none: --prefix-cache-mb 0"
    return f"laya-robustness: prompt prefix sharing ({kind}): {how}"


def token_lines(stats: dict[str, dict]) -> list[str]:
    """Per scorer that counts them: the language-model tokens it computed and those it would have computed had each
    row run its whole prompt and options."""
    lines = []
    for key, st in sorted(stats.items()):
        computed, alone = st.get("tokens", 0), st.get("tokens_alone", 0)
        if computed and alone:
            lines.append(f"language model ({key}): {computed:,} tokens computed for {st.get('rows', 0):,} rows; "
                         f"{alone:,} had each row run its whole prompt ({alone / computed:.2f}x)")
    return lines


def write_summary(reporter, session) -> None:
    for line, complete in scope_lines(session.scopes):
        reporter.write_line(line, green=complete, yellow=not complete)
    if session.start_error is not None:
        reporter.write_line(f"ERROR (exit {session.start_error[0]}, nothing was run): {session.start_error[1]}",
                            red=True)
    for note in session.lock_notes:
        reporter.write_line(f"laya-robustness: {note}")
    for error in session.harness_errors:
        reporter.write_line(f"HARNESS ERROR (exit 3, not a gate failure): {error}", red=True)
    if not session.records and not session.invariance_results:
        return
    known = session.thresholds.known_limitation
    for device, conditions in sorted(session.invariance_results.items()):
        reporter.write_sep("=", f"invariance ({device}): each condition vs its own path's reference")
        for line in invariance_lines(conditions, invariance_verdicts(_verdicts(session.results, device, known))):
            reporter.write_line(line)
    for device, summary in sorted(session.summaries.items()):
        reporter.write_sep("=", f"robustness gate ({device}): headline [95% CI] per family and dataset, checks")
        for line in table_lines(summary, session.results, device, known):
            reporter.write_line(line)
    for line in token_lines(session.scorer_stats()):
        reporter.write_line(line)
    power = power_lines(session.results)
    if power:
        reporter.write_sep("-", "too few rows to tell a 5-point change from none at the gate's error rate")
        for line in power:
            reporter.write_line(line)
    for outcome in getattr(session, "snapshot_outcomes", []):
        if outcome.matches:
            reporter.write_line(f"summary snapshot ({outcome.device}): matches {outcome.name} (compared on the controller)")
            continue
        reporter.write_sep("-", f"summary snapshot ({outcome.device}) DIFFERS from {outcome.name}", red=True)
        for line in outcome.diff.splitlines():
            reporter.write_line(line)
        reporter.write_line("review the change; accept it with `pytest robustness_tests --snapshot-update` (-n 0)")
    for path in getattr(session, "written", []):
        reporter.write_line(f"wrote {path}")
    if session.incomplete_reason:
        kept = " (the complete report of the previous run was kept; this one has '.incomplete' in its names)" \
            if session.kept_previous_report else ""
        narrowed = sorted({n for s in session.scopes.values() if not s.complete for n in s.narrowed_by
                           if not n.startswith("--families")})
        advice = f"rerun without {', '.join(narrowed)} to judge every cell (--resume reuses what this run scored)" \
            if narrowed else "rerun with --resume to finish it"
        reporter.write_line(f"INCOMPLETE RUN: {session.incomplete_reason}{kept}; {advice}", yellow=True)
