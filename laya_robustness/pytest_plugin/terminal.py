"""The terminal header and summary, verdict last: what the report covers; with ``-v`` the long tables (per summary
block one row per (family, dataset) with its headline numbers and checks); the language-model tokens the scorers
computed; then the failed and newly passing checks and the verdict counts.

Every block of the summary appears (the flat table and every extension block), its columns and
families derived from the declarations (``laya_robustness.report.cell_rows``). Tables fit in ``WIDTH``
columns: a row whose checks do not fit says how many checks decided it instead of naming them,
and a block that still does not fit drops its intervals. The lines a person reads (what each report covers,
errors, failed checks, the verdict counts, notes) are wrapped to the terminal's width, continuations indented
(``report.wrapping``).
pytest-benchmark's table, printed just before the summary, shows ``BENCHMARK_COLUMNS`` unless ``--benchmark-columns``
names others: its ten default columns make it about 250 characters wide, wrapped into the summary on a terminal.
"""

from __future__ import annotations

from pathlib import Path

from laya_robustness.pytest_plugin.snapshot import accept_command
from laya_robustness.report.cell_rows import (
    FAIL,
    MARKS,
    NO_CHECK,
    UNCHECKED,
    XPASS,
    cell_rows,
    cell_verdicts,
    columns_of,
    delta_text,
    invariance_verdicts,
    probability_lines,
    problems,
    summary_blocks,
    text_rows,
    verdict_line,
)
from laya_robustness.report.wrapping import wrap
from laya_robustness.run.pipeline.scorer_sources import model_type
from laya_robustness.scoring.adapters import adapter_class

WIDTH = 120
#: pytest-benchmark's columns when ``--benchmark-columns`` is not given: the median time, its spread and the rounds.
BENCHMARK_COLUMNS = ("median", "iqr", "rounds")


def narrow_benchmark_table(config) -> None:
    """Have pytest-benchmark's table show ``BENCHMARK_COLUMNS`` when ``--benchmark-columns`` is not given (called
    before pytest-benchmark reads its options; nothing without pytest-benchmark)."""
    if getattr(config.option, "benchmark_columns", ()) is None:
        config.option.benchmark_columns = list(BENCHMARK_COLUMNS)



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


def problem_lines(verdicts: dict) -> list[str]:
    """One line per failed check and per known limitation that now passes, with its numbers."""
    lines = []
    for status, family, dataset, check in problems(verdicts):
        todo = " (a known limitation that now passes: remove it from the limitations file)" if status == XPASS else ""
        lines.append(f"{MARKS[status]} {family}/{dataset} {check.check}: {check.detail}{todo}")
    return lines


def verdict_lines(outcome, device: str, verbose: bool) -> list[str]:
    """The verdict of one device (``outcome``: the run's ``RunOutcome``): what failed or newly passes, the counts,
    and where the detail is."""
    results = outcome.results()
    verdicts = _verdicts(results, device, outcome.known_limitation)
    summary = outcome.summaries.get(device) or {}
    lines = [*problem_lines(verdicts), *probability_lines(summary), f"verdicts: {verdict_line(verdicts)}"]
    power = power_lines(results)
    if power and not verbose:
        lines.append(f"{len(power)} interval-judged checks have too few rows to tell a 5-point change from none "
                     "(`pytest -v` lists them)")
    return lines


def detail_lines(outcome) -> list[tuple[str, list[str]]]:
    """The long tables, each under its heading: invariance conditions, every summary block, the power lines."""
    known, results = outcome.known_limitation, outcome.results()
    sections = []
    for device, report in sorted(outcome.reports.items()):
        if report.invariance is not None:
            verdicts = invariance_verdicts(_verdicts(results, device, known))
            sections.append((f"invariance ({device}): each condition vs its own path's reference",
                             invariance_lines(report.conditions, verdicts)))
    for device, summary in sorted(outcome.summaries.items()):
        sections.append((f"robustness gate ({device}): headline [95% CI] per family and dataset, checks",
                         table_lines(summary, results, device, known)))
    power = power_lines(results)
    if power:
        sections.append(("too few rows to tell a 5-point change from none at the gate's error rate", power))
    return sections


def write_summary(reporter, session) -> None:
    """The end of a run, verdict last: what each report covers, errors; the long tables only with ``-v``; the
    token counts; the snapshot; where the reports are; then per device the failed and newly passing checks and
    the verdict counts. ``-q`` leaves out the snapshot match and the reports line."""
    outcome = session.outcome
    for line, complete in scope_lines(outcome.scopes if outcome is not None else {}):
        write_wrapped(reporter, line, green=complete, yellow=not complete)
    if session.start_error is not None:
        status, why = session.start_error
        write_wrapped(reporter, f"ERROR (exit {status}, nothing was run): {why}", red=True)
    if outcome is None:
        _nothing_judged(reporter, session)
        return
    for note in outcome.lock_notes:
        write_wrapped(reporter, f"laya-robustness: {note}")
    for error in outcome.harness_errors:
        write_wrapped(reporter, f"HARNESS ERROR (exit 3, not a gate failure): {error}", red=True)
    if session.snapshot_note:
        reporter.write_line(f"laya-robustness: {session.snapshot_note}")
    if not outcome.reports:
        _nothing_judged(reporter, session)
        return
    verbosity = reporter.config.getoption("verbose", 0)
    if verbosity > 0:
        for title, lines in detail_lines(outcome):
            reporter.write_sep("=", title)
            for line in lines:
                reporter.write_line(line)
    for line in token_lines(dict(outcome.scorer_stats)):
        write_wrapped(reporter, line)
    for snapshot in session.snapshot_outcomes:
        if snapshot.matches:
            if verbosity >= 0:
                reporter.write_line(f"summary snapshot ({snapshot.device}): matches {snapshot.name} ({snapshot.where})")
            continue
        reporter.write_sep("-", f"summary snapshot ({snapshot.device}) DIFFERS from {snapshot.name}", red=True)
        for line in snapshot.changes:
            reporter.write_line(f"  {line}", red="BEYOND" in line)
        for line in snapshot.diff.splitlines():
            reporter.write_line(line)
        reporter.write_line(f"review the change; accept it with `{accept_command(reporter.config)}`")
    if outcome.written and verbosity >= 0:
        write_wrapped(reporter, written_line(list(outcome.written)))
    if outcome.incomplete_reason:
        kept = " (the complete report of the previous run was kept; this one has '.incomplete' in its names)" \
            if outcome.kept_previous_report else ""
        narrowed = sorted({n for s in outcome.scopes.values() if not s.complete for n in s.narrowed_by
                           if not n.startswith("--families")})
        advice = f"rerun without {', '.join(narrowed)} to judge every cell (--resume reuses what this run scored)" \
            if narrowed else "rerun with --resume to finish it"
        write_wrapped(reporter, f"INCOMPLETE RUN: {outcome.incomplete_reason}{kept}; {advice}", yellow=True)
    for device in sorted(outcome.reports):
        reporter.write_sep("=", f"robustness gate ({device}): verdict")
        for line in verdict_lines(outcome, device, verbosity > 0):
            failing = line.startswith(MARKS[FAIL]) or line.startswith(MARKS[XPASS])
            write_wrapped(reporter, line, red=failing)
    for line, failing in folded_lines(outcome.folded):
        write_wrapped(reporter, line, red=failing)
    _nothing_judged(reporter, session)


def folded_lines(folded) -> list[tuple[str, bool]]:
    """``(line, failing)``: what a narrowed run took from the earlier run in its report folder for the checks it did
    not judge (``pytest_plugin.earlier``), each failed check there first, or why it took nothing.

    >>> from laya_robustness.run.outcome import Folded
    >>> failed, counted = folded_lines(Folded("reports", 3, ("text/a max_flip: flip 0.3 > max_flip 0.1",)))
    >>> failed
    ("FAIL text/a max_flip: flip 0.3 > max_flip 0.1 (the earlier run's verdict: not judged again)", True)
    >>> counted[0].endswith("keep the verdicts of the run in reports (the same configuration): 1 failed there")
    True
    """
    if folded is None or not (folded.taken or folded.refused):
        return []
    if folded.refused:
        return [(f"the earlier run's verdicts are not folded in: {folded.refused}", False)]
    failed = [(f"{MARKS[FAIL]} {line} (the earlier run's verdict: not judged again)", True) for line in folded.failures]
    status = f"{len(folded.failures)} failed there" if folded.failures else "none failed there"
    return failed + [(f"folded in: the {folded.taken} checks this run did not judge keep the verdicts of the run in "
                      f"{folded.source} (the same configuration): {status}", bool(folded.failures))]


def write_wrapped(reporter, line: str, **markup) -> None:
    """A line a person reads, wrapped to the terminal's width (``report.wrapping``: continuations indented)."""
    width = getattr(getattr(reporter, "_tw", None), "fullwidth", 80)
    for part in wrap(line, width - 1):
        reporter.write_line(part, **markup)


def _nothing_judged(reporter, session) -> None:
    """The last line of a run that judged no check: it does not pass (exit 4 or 3), and why."""
    nothing = session.nothing_judged
    if nothing is not None:
        write_wrapped(reporter, f"NOTHING JUDGED (exit {nothing.status}, the gate did not pass): {nothing.message}",
                      red=True)


def written_line(paths: list) -> str:
    """``reports: summary.md, report.html, ... in reports/ (the tables: pytest -v or summary.md)``."""
    folders = sorted({str(Path(p).parent) for p in paths})
    names = ", ".join(Path(p).name for p in paths)
    where = folders[0] if len(folders) == 1 else ", ".join(folders)
    return f"reports in {where}/: {names} (the tables per family and dataset: summary.md, report.html, pytest -v)"
