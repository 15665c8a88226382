"""Reports people look at: ``report.html`` (tables, flipped examples, plots), ``summary.md`` (a PR comment) and
the plain-text tables of the terminal and the command line.

``write_report`` renders both from a run's summary and records (the gate calls it after writing
summary.json); ``render_files`` does the same offline from a predictions file and the summary.json
and invariance.json beside it (``python -m laya_robustness report``), recomputing the verdicts from
the limits files and rebuilding the shown rows from the data.
"""

from __future__ import annotations

from laya_robustness.report.render import REPORT_HTML, SUMMARY_MD, load_limits, render_files, write_report

__all__ = ["REPORT_HTML", "SUMMARY_MD", "load_limits", "render_files", "write_report"]
