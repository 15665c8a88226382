"""Throughput of the scorer paths and of the variant builders (pytest-benchmark; run without xdist).

`pytest robustness_tests --benchmark-only` runs just these. Device work is synchronised inside the
timed function. Each scorer benchmark starts every round from empty caches (a fresh copy of the
scorer, made outside the timing), so it pays image preprocessing and vision encodes as a run does,
and records rows/s, the scorer's counters and the ratio to the per-option path in its extra_info.
The SmolVLM-256M-shaped workload is marked ``slow``. The attention-mask benchmark times the one-pass
masks of a batch of real-photo-length prompts on the run's device.
"""

import time

import pytest

from laya_robustness.families import FLAT, build_variants, families_in
from laya_robustness.run.images import rows_with_pixels
from laya_robustness.scoring import layout

FLAT_FAMILIES = tuple(f.name for f in families_in(FLAT) if f.name != "orig")

BENCH_ROWS = 32
#: Prompt tokens of a photo row for SmolVLM-256M: 17 tiles (4 x 4 and the whole image) x 64 image tokens + text.
PHOTO_PROMPT_TOKENS = 17 * 64 + 40
PATHS = ("batch", "per_option", "predict_cached", "predict_uncached")


def _synchronised(fn, device):
    def run(*args):
        out = fn(*args)
        if str(device).startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return out

    return run


def _rows(robustness):
    rows = [r for name in robustness.datasets for r in robustness.rows[name]]
    step = max(1, len(rows) // BENCH_ROWS)
    return rows_with_pixels(rows[::step][:BENCH_ROWS])


def _fresh(scorer):
    """A copy with empty caches where the scorer can make one (the HF scorer), else the scorer itself."""
    return scorer.replaced() if hasattr(scorer, "replaced") else scorer


def _score(path, rows):
    def run(scorer):
        if path == "batch":
            return scorer.score_batch(rows)
        if path == "per_option":
            return scorer.score_batch_per_option(rows)
        out = []
        for row in rows:  # one call per row: the predict path's unit of work
            out += scorer.score_predict([row], use_cache=path == "predict_cached")
        return out

    return run


def _measure(benchmark, scorer, rows, path, device, rounds):
    """Benchmark one path from empty caches; rows/s, counters and the per-option ratio in extra_info."""
    if path == "per_option" and not hasattr(scorer, "score_batch_per_option"):
        pytest.skip(f"{type(scorer).__name__} has no per-option path")
    fresh = []  # the latest round's copy only: each holds its own caches (up to 2 GiB, on the device)

    def setup():
        fresh[:] = [_fresh(scorer)]
        return (fresh[-1],), {}

    out = benchmark.pedantic(_synchronised(_score(path, rows), device), setup=setup, rounds=rounds, iterations=1)
    assert len(out) == len(rows) and all(len(lg) == len(r.options) for lg, r in zip(out, rows))
    if benchmark.stats:
        mean = benchmark.stats.stats.mean
        benchmark.extra_info.update(rows=len(rows), rows_per_s=round(len(rows) / mean, 2),
                                    stats=dict(getattr(fresh[-1], "stats", {})))
        if path != "per_option" and hasattr(scorer, "score_batch_per_option"):
            reference = _fresh(scorer)
            started = time.perf_counter()
            _synchronised(_score("per_option", rows), device)(reference)
            per_option = time.perf_counter() - started
            benchmark.extra_info["per_option_rows_per_s"] = round(len(rows) / per_option, 2)
            benchmark.extra_info["ratio_to_per_option"] = round(per_option / mean, 2)
    return out


@pytest.mark.parametrize("path", PATHS)
def test_scorer_throughput(benchmark, robustness, device, path):
    """rows/s of the one-pass batch path, the per-option batch path and predict with / without the prefix cache."""
    _measure(benchmark, robustness.scorer(device), _rows(robustness), path, device, rounds=3)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_smolvlm_256m_shaped_throughput(benchmark, robustness, device, path, tmp_path_factory):
    """The SmolVLM-256M-shaped model (random weights, built from config): 6 photo rows + their option_order variants."""
    from laya_robustness.fixtures.bench import build_256m_shaped, workload
    from laya_robustness.scoring import load_scorer

    root = tmp_path_factory.getbasetemp() / "smolvlm-256m-shaped"
    model = root if (root / "config.json").exists() else build_256m_shaped(root)
    started = time.perf_counter()
    scorer = load_scorer("hf", str(model), device=device, batch_size=robustness.settings.batch_size)
    load_s = time.perf_counter() - started
    rows = workload()
    assert len(rows) > 30 and len({r.group_id for r in rows}) == 6
    _measure(benchmark, scorer, rows, path, device, rounds=1)
    if benchmark.stats:
        benchmark.extra_info["load_s"] = round(load_s, 2)


@pytest.mark.parametrize("family", FLAT_FAMILIES)
def test_variant_build_time(benchmark, robustness, family):
    """Time to build a family's variants for every source row of the run (decoded before the timing)."""
    decoded = {name: rows_with_pixels(robustness.rows[name]) for name in robustness.datasets}
    rows = [r for name in robustness.datasets for r in decoded[name]]
    variants = benchmark.pedantic(lambda: [v for name in robustness.datasets
                                           for v in build_variants(family, decoded[name], robustness.seed)],
                                  rounds=3, iterations=1)
    assert variants and all(v.family == family for v in variants)
    if benchmark.stats:
        benchmark.extra_info["source_rows"] = len(rows)
        benchmark.extra_info["variants"] = len(variants)


def test_attention_mask_build_time(benchmark, robustness, device):
    """Time to build the one-pass additive attention mask of ``batch_size`` four-option photo rows on the device."""
    import numpy as np
    import torch

    n = PHOTO_PROMPT_TOKENS
    prompt = layout.Prompt(tuple(range(1, n + 1)), np.arange(n)[None], np.full(n, -1))
    seqs = [layout.pack(prompt, [[7] * (2 + (i + j) % 3) for j in range(4)])
            for i in range(robustness.settings.batch_size)]
    batch = layout.collate(seqs, pad_id=0)

    def build():
        return layout.additive_mask(layout.allowed(batch, device=device), torch.float32)

    mask = benchmark.pedantic(_synchronised(build, device), rounds=5, iterations=1)
    b, s = batch.ids.shape
    assert tuple(mask.shape) == (b, 1, s, s) and str(mask.device).startswith(str(device).split(":")[0])
    # each option's last fed token sees the whole prompt and its own tokens, never another option's
    seen = mask[0, 0, len(seqs[0]) - 1] == 0
    assert int(seen.sum()) == n + len(seqs[0].targets[-1]) - 1
    if benchmark.stats:
        benchmark.extra_info.update(rows=b, tokens=s, mask_mb=round(mask.numel() * mask.element_size() / 2**20, 1))
