"""The terminal summary: families x datasets with each cell's numbers and its checks' outcome."""

from __future__ import annotations

MARKS = {"fail": "FAIL", "xfail": "xfail", "pass": "ok"}


def _outcome(results: list[dict], family: str, dataset: str, device: str, known) -> str:
    mine = [r for r in results if (r["family"], r["dataset"], r["device"]) == (family, dataset, device)]
    if not mine:
        return ""
    failed = [r for r in mine if not r["passed"]]
    if not failed:
        return MARKS["pass"]
    if all(known(family, dataset, r["check"]) for r in failed):
        return MARKS["xfail"]
    return MARKS["fail"]


def cell_text(cell: dict | None, family: str) -> str:
    """``acc / delta / flip`` of a summary cell (``acc`` alone for orig)."""
    if not cell or cell.get("acc") is None:
        return "-"
    if family == "orig" or cell.get("flip") is None or cell.get("delta") is None:
        return f"{cell['acc']:.3f}"
    return f"{cell['acc']:.3f} / {cell['delta']:+.3f} / {cell['flip']:.3f}"


def table_lines(summary: dict, results: list[dict], device: str, known) -> list[str]:
    families = sorted(summary["families"], key=lambda f: (f != "orig", f))
    datasets = sorted({d for f in families for d in summary["families"][f]})
    header = ["dataset"] + families
    rows = [header]
    for d in datasets:
        row = [d]
        for f in families:
            text = cell_text(summary["families"][f].get(d), f)
            mark = _outcome(results, f, d, device, known)
            row.append(f"{text} [{mark}]" if mark else text)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def invariance_lines(conditions: dict) -> list[str]:
    """One line per condition: precision, max |dp|, max |dlogit|, flips / rows, bitwise."""
    rows = [["condition", "precision", "max |dp|", "max |dlogit|", "flips / rows", "bitwise"]]
    for name, st in sorted(conditions.items()):
        rows.append([name, st["precision"], f"{st['max_abs_dp']:.1e}", f"{st['max_abs_dlogit']:.1e}",
                     f"{st['flips']} / {st['rows']}", "yes" if st["bitwise"] else "no"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def write_summary(reporter, session) -> None:
    for error in session.harness_errors:
        reporter.write_line(f"HARNESS ERROR (exit 3, not a gate failure): {error}", red=True)
    if not session.records and not session.invariance_results:
        return
    for device, conditions in sorted(session.invariance_results.items()):
        reporter.write_sep("=", f"invariance ({device}): each condition vs its own path's reference")
        for line in invariance_lines(conditions):
            reporter.write_line(line)
    known = session.thresholds.known_limitation
    for device, summary in sorted(session.summaries.items()):
        reporter.write_sep("=", f"robustness gate ({device}): acc / delta / flip per family, [checks]")
        for line in table_lines(summary, session.results, device, known):
            reporter.write_line(line)
    for path in getattr(session, "written", []):
        reporter.write_line(f"wrote {path}")
    if session.incomplete_reason:
        kept = " (the complete report of the previous run was kept; this one has '.incomplete' in its names)" \
            if session.kept_previous_report else ""
        reporter.write_line(f"INCOMPLETE RUN: {session.incomplete_reason}{kept}; rerun with --resume to finish it",
                            yellow=True)
