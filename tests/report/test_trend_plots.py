"""trend.html's plots read well: a metric per plot, at most ``TREND_LINES`` lines each, a colour and marker per line,
the legend outside the data, ticks at the checkpoint steps, the size in pixels the page shows them at.

The checkpoints are the fake oracle scorer's (``helpers.report_folders.make_checkpoints``) at a margin that grows with
the step, so every headline moves."""

import base64
import re
import struct
import sys

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex  # noqa: E402

from laya_robustness.report.plots import TREND_DPI, TREND_INCHES, TREND_LINES, trend_figures  # noqa: E402
from laya_robustness.report.trend import read_checkpoints, trend_html, trend_rows  # noqa: E402

from helpers.report_folders import make_checkpoints  # noqa: E402

SIZE = (round(TREND_INCHES[0] * TREND_DPI), round(TREND_INCHES[1] * TREND_DPI))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return read_checkpoints(make_checkpoints(tmp_path_factory.mktemp("trend")))


def _figures(checkpoints):
    rows, steps = trend_rows(checkpoints), [c.step for c in checkpoints]
    families = list(dict.fromkeys(r["family"] for r in rows))
    return rows, steps, {family: trend_figures(rows, steps, family) for family in families}


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_each_plot_is_one_metric_of_a_few_distinct_lines_legend_outside_ticks_at_the_steps(checkpoints):
    rows, steps, figures = _figures(checkpoints)
    drawn = set()
    for family, plots in figures.items():
        assert plots, family
        for title, fig in plots:
            assert tuple(round(x) for x in fig.get_size_inches() * fig.dpi) == SIZE, title
            fig.draw_without_rendering()
            (ax,) = fig.axes
            lines = ax.get_lines()
            assert 1 <= len(lines) <= TREND_LINES, title
            assert len({to_hex(line.get_color()) for line in lines}) == len(lines), title
            assert len({line.get_marker() for line in lines}) == len(lines), title
            assert len(ax.collections) == len(lines), title  # every line has its interval band
            (legend,) = fig.legends
            box, data = legend.get_window_extent(), ax.get_window_extent()
            assert not _overlap(box, data), title
            assert box.x1 <= fig.bbox.x1 + 1 and box.y0 >= -1, title  # inside the picture
            assert [t.get_text() for t in legend.get_texts()] == [line.get_label() for line in lines]
            assert list(ax.get_xticks()) == steps and all(float(s).is_integer() for s in ax.get_xticks()), title
            assert ax.get_xlabel() == "step" and ax.get_ylabel(), title
            metric = title.split(": ")[1].split(" (")[0]
            drawn |= {(family, line.get_label(), metric) for line in lines}
    assert drawn == {(r["family"], r["dataset"], r["metric"]) for r in rows}  # every row of the table is drawn


def test_a_family_of_many_datasets_is_split_into_plots_of_at_most_five_lines():
    rows = [{"family": "wide", "dataset": f"set_{i:02d}", "metric": metric, "values": [(0.5, [0.4, 0.6]), None],
             "changes": [None]} for i in range(12) for metric in ("acc", "flip")]
    plots = trend_figures(rows, [10, 20], "wide")
    assert [title for title, _ in plots] == [f"wide: {m} ({n} of 3)" for m in ("acc", "flip") for n in (1, 2, 3)]
    assert [len(fig.axes[0].get_lines()) for _, fig in plots] == [5, 5, 2] * 2


def test_the_page_embeds_each_plot_as_a_png_of_its_size(checkpoints):
    _, _, figures = _figures(checkpoints)
    page = trend_html(checkpoints)
    images = re.findall(r"<img alt='([^']+)' src='data:image/png;base64,([^']+)'>", page)
    assert [alt for alt, _ in images] == [title for plots in figures.values() for title, _ in plots]
    for alt, data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", alt
        assert struct.unpack(">II", png[16:24]) == SIZE, alt


def test_without_matplotlib_the_page_is_the_table_alone(checkpoints, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    page = trend_html(checkpoints)
    assert "<img" not in page and page.count("<table>") == len({r["family"] for r in trend_rows(checkpoints)})
