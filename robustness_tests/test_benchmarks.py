"""Throughput of the scorer paths and of the variant builders (pytest-benchmark; run without xdist).

`pytest robustness_tests --benchmark-only` runs just these. Device work is synchronised inside the
timed function, and each benchmark records rows/s in its extra_info.
"""

import pytest

from laya_robustness.families import FLAT, build_variants, families_in

FLAT_FAMILIES = tuple(f.name for f in families_in(FLAT) if f.name != "orig")

BENCH_ROWS = 32


def _synchronised(fn, device):
    def run():
        out = fn()
        if str(device).startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return out

    return run


def _rows(robustness):
    rows = [r for name in robustness.datasets for r in robustness.rows[name]]
    step = max(1, len(rows) // BENCH_ROWS)
    return rows[::step][:BENCH_ROWS]


@pytest.mark.parametrize("path", ["batch", "predict_cached", "predict_uncached"])
def test_scorer_throughput(benchmark, robustness, device, path):
    """rows/s of the batch path and of the predict path with and without the prefix cache."""
    scorer, rows = robustness.scorer(device), _rows(robustness)
    fn = {"batch": lambda: scorer.score_batch(rows),
          "predict_cached": lambda: scorer.score_predict(rows, use_cache=True),
          "predict_uncached": lambda: scorer.score_predict(rows, use_cache=False)}[path]
    out = benchmark.pedantic(_synchronised(fn, device), rounds=3, iterations=1, warmup_rounds=1)
    assert len(out) == len(rows) == BENCH_ROWS
    if benchmark.stats:
        benchmark.extra_info["rows"] = len(rows)
        benchmark.extra_info["rows_per_s"] = round(len(rows) / benchmark.stats.stats.mean, 1)


@pytest.mark.parametrize("family", FLAT_FAMILIES)
def test_variant_build_time(benchmark, robustness, family):
    """Time to build a family's variants for every source row of the run."""
    rows = [r for name in robustness.datasets for r in robustness.rows[name]]
    variants = benchmark.pedantic(lambda: [v for name in robustness.datasets
                                           for v in build_variants(family, robustness.rows[name], robustness.seed)],
                                  rounds=3, iterations=1)
    assert variants and all(v.family == family for v in variants)
    if benchmark.stats:
        benchmark.extra_info["source_rows"] = len(rows)
        benchmark.extra_info["variants"] = len(variants)
