"""Draw the report's plots with matplotlib (no pyplot, no global state) as inline SVG data URIs.

Each function takes the numbers of ``report.curves`` and returns ``data:image/svg+xml;base64,...``;
the SVG is byte-stable for the same numbers (fixed hash salt, no date), and text stays text.
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
