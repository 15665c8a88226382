"""Draw the reports' plots with matplotlib (no pyplot, no global state).

report.html's: each function takes the numbers of ``report.curves`` and returns ``data:image/svg+xml;base64,...``;
the SVG is byte-stable for the same numbers (fixed hash salt, no date), and text stays text. trend.html's:
``trend_figures`` draws a family's headlines against the checkpoint step, one metric and at most
``TREND_LINES`` datasets per plot, and ``png_base64`` encodes one for the page.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Sequence

from laya_robustness.records import ORIG
from laya_robustness.report.curves import Reliability, StrengthCurve

_RC = {"svg.hashsalt": "laya-robustness", "svg.fonttype": "none", "font.size": 8, "axes.titlesize": 9,
       "axes.spines.top": False, "axes.spines.right": False}
#: One colour per dataset, in sorted dataset order (matplotlib's tab10 cycle).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
#: At most this many lines in one trend plot: a family with more datasets gets more plots per metric.
TREND_LINES = 5
#: A trend plot's size in inches and its resolution: 620 x 310 px, two side by side in a 1280 px window.
TREND_INCHES, TREND_DPI = (6.2, 3.1), 100
#: A trend plot's marker per line, with its colour (``COLOURS``): no two lines of a plot alike.
MARKERS = ("o", "s", "^", "D", "v")
#: The y-axis label of a flat family's headline metric (another metric is labelled with its own key).
METRIC_NAMES = {"acc": "accuracy", "delta": "delta vs orig (paired)", "flip": "flip rate"}
#: The longest dataset name a trend legend shows in full (the table beside the plot has every name).
LEGEND_CHARS = 24


def _figure(n_panels: int, columns: int, panel_in: tuple[float, float], legend_in: float = 0.0):
    from matplotlib.figure import Figure

    rows = max(1, math.ceil(n_panels / columns))
    cols = min(columns, max(1, n_panels))
    width, height = panel_in[0] * cols, panel_in[1] * rows + legend_in
    fig = Figure(figsize=(width, height))
    # fixed margins in inches (a layout engine costs more than the drawing itself)
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.15 / width, top=1 - 0.3 / height,
                        bottom=(legend_in + 0.45) / height, wspace=0.45, hspace=0.75)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def svg_uri(fig) -> str:
    """The figure as a base64 SVG data URI (byte-stable: fixed hash salt, no date)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def reliability_uri(diagrams: Sequence[Reliability], columns: int = 4) -> str | None:
    """Small multiples: per family, accuracy against confidence per bin (bars) with orig's curve over it.

    None when there is nothing to draw.
    """
    import matplotlib

    if not diagrams:
        return None
    orig = next((d for d in diagrams if d.family == ORIG), None)
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(len(diagrams), columns, (2.3, 2.1))
        for ax, d in zip(axes, diagrams):
            width = 1 / 15
            ax.bar([b[0] + width / 2 for b in d.bins], [b[3] for b in d.bins], width=width * 0.9,
                   color="#4c72b0", alpha=0.75, label=f"{d.family}")
            ax.plot([0, 1], [0, 1], color="#999999", linewidth=0.8, linestyle=":")
            if orig is not None and d.family != ORIG:
                ax.plot([b[2] for b in orig.bins], [b[3] for b in orig.bins], color="#333333", marker=".",
                        linewidth=1, markersize=3, label="orig")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{d.family}  ECE {d.ece:.3f}  n={d.n_rows}")
            ax.set_xlabel("confidence (max prob)")
            ax.set_ylabel("accuracy")
            if d.family != ORIG and orig is not None:
                ax.legend(loc="upper left", frameon=False, fontsize=7)
        return svg_uri(fig)


def strength_uri(curves: Sequence[StrengthCurve], columns: int = 3) -> str | None:
    """Per strength axis: accuracy (solid) and flip rate (dashed) per dataset, orig accuracy dotted.

    None when there is nothing to draw.
    """
    import matplotlib
    from matplotlib.lines import Line2D

    if not curves:
        return None
    datasets = sorted({d for c in curves for d in c.points})
    colour = {d: COLOURS[i % len(COLOURS)] for i, d in enumerate(datasets)}
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(len(curves), columns, (3.2, 2.4), legend_in=0.35)
        for ax, c in zip(axes, curves):
            for d, points in sorted(c.points.items()):
                xs = [p[0] for p in points]
                ax.plot(xs, [p[1] for p in points], color=colour[d], marker="o", markersize=3, linewidth=1.2)
                ax.plot(xs, [p[2] for p in points], color=colour[d], marker="x", markersize=3, linewidth=1,
                        linestyle="--")
                if c.orig_acc.get(d) is not None:
                    ax.axhline(c.orig_acc[d], color=colour[d], linewidth=0.7, linestyle=":")
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{c.family}: {c.label}")
            ax.set_xlabel(c.label)
            ax.set_ylabel("acc (solid), flip (dashed)")
        handles = [Line2D([], [], color=colour[d], label=d) for d in datasets]
        handles += [Line2D([], [], color="#555555", linestyle=":", label="orig acc")]
        fig.legend(handles=handles, loc="lower center", ncols=min(6, len(handles)), frameon=False)
        return svg_uri(fig)


def png_base64(fig) -> str:
    """The figure as base64 PNG at ``TREND_DPI`` (no software stamp)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=TREND_DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def trend_figures(rows: Sequence[dict], steps: Sequence[int], family: str) -> list[tuple[str, object]]:
    """``(title, figure)`` per metric of ``family``'s trend rows (``report.trend.trend_rows``) and per at most
    ``TREND_LINES`` of its datasets: each dataset's value against the step, its 95% interval as a band."""
    mine = [r for r in rows if r["family"] == family]
    metrics = list(dict.fromkeys(r["metric"] for r in mine))
    out = []
    for metric in metrics:
        series = [r for r in mine if r["metric"] == metric]
        parts = [series[i:i + TREND_LINES] for i in range(0, len(series), TREND_LINES)]
        for n, part in enumerate(parts, 1):
            title = f"{family}: {metric}" + (f" ({n} of {len(parts)})" if len(parts) > 1 else "")
            out.append((title, _trend_figure(title, METRIC_NAMES.get(metric, metric), part, steps)))
    return out


def _trend_figure(title: str, ylabel: str, series: Sequence[dict], steps: Sequence[int]):
    """One plot: a line (colour and marker its own) per row of ``series``, the legend right of the axes."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=TREND_INCHES, dpi=TREND_DPI, layout="constrained")
    ax = fig.add_subplot()
    for i, r in enumerate(series):
        value = np.array([np.nan if v is None else v[0] for v in r["values"]])
        low, high = (np.array([np.nan if v is None or not v[1] else v[1][k] for v in r["values"]]) for k in (0, 1))
        name = r["dataset"] if len(r["dataset"]) <= LEGEND_CHARS else r["dataset"][:LEGEND_CHARS - 1] + "\u2026"
        ax.plot(steps, value, color=COLOURS[i], marker=MARKERS[i], markersize=5, linewidth=1.6, label=name)
        if not np.isnan(low).all():
            ax.fill_between(steps, low, high, color=COLOURS[i], alpha=0.15, linewidth=0)
    if len(steps) <= 12:
        ax.set_xticks(list(steps))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(steps) == 1:
        ax.set_xlim(steps[0] - 1, steps[0] + 1)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(loc="outside right upper", frameon=False, title="dataset")
    return fig
