"""Throughput of the scorer paths and of the variant builders (pytest-benchmark; run without xdist).

`pytest robustness_tests --benchmark-only` runs just these. Device work is synchronised inside the
timed function. A served model (``--scorer openai``) has no batch or predict path: its benchmark is the
requests per second of its rows at ``--concurrency`` (``test_served_throughput``). Each scorer benchmark
starts every round from empty caches (a fresh copy of the
scorer, made outside the timing), so it pays image preprocessing and vision encodes as a run does,
and records rows/s, the scorer's counters (language-model tokens computed, and ``tokens_alone``, had
every row run its whole prompt) and, on the embedded default, the ratios to the per-option path and
to the same path without prefix sharing (``*_unshared``: no prefix store) in its extra_info. The
SmolVLM-256M-shaped workload (image splitting on: 17 tiles a photo, the photos with their
option_order, text and rephrase variants) is marked ``slow``. The attention-mask benchmark times the
one-pass masks of a batch of real-photo-length prompts on the run's device.
"""

import time

import pytest

from laya_robustness.families import FLAT, build_variants, families_in
from laya_robustness.run.pipeline.image_store import rows_with_pixels
from laya_robustness.scoring import layout
from laya_robustness.scoring.base import answers_in_text

FLAT_FAMILIES = tuple(f.name for f in families_in(FLAT) if f.name != "orig")

BENCH_ROWS = 32
#: Prompt tokens of a photo row for SmolVLM-256M: 17 tiles (4 x 4 and the whole image) x 64 image tokens + text.
PHOTO_PROMPT_TOKENS = 17 * 64 + 40
PATHS = ("batch", "batch_unshared", "per_option", "predict_cached", "predict_cached_unshared", "predict_uncached")
SHARED_PATHS = ("batch", "batch_unshared", "predict_cached", "predict_cached_unshared")
#: Photos of the SmolVLM-256M-shaped workload: 1024 px, cut into 17 tiles of 512 px (1.6 s a tile to encode on
#: two CPU cores), each with 14 text-side variants.
SPLIT_PHOTOS, SPLIT_PHOTO_SIZE = 2, 1024
UNSHARED = "_unshared"


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


def _fresh(scorer, path="batch"):
    """A copy with empty caches where the scorer can make one (the HF scorer), else the scorer itself; without a
    prefix store for an ``*_unshared`` path."""
    if not hasattr(scorer, "replaced"):
        return scorer
    return scorer.replaced(prefix_cache_bytes=0) if path.endswith(UNSHARED) else scorer.replaced()


def _score(path, rows):
    path = path.removesuffix(UNSHARED)

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


def _seconds(scorer, path, rows, device) -> float:
    """Wall time of one pass of ``path`` over ``rows`` on a fresh copy of the scorer."""
    reference = _fresh(scorer, path)
    started = time.perf_counter()
    _synchronised(_score(path, rows), device)(reference)
    return time.perf_counter() - started


def _measure(benchmark, scorer, rows, path, device, rounds, references=True) -> dict:
    """Benchmark one path from empty caches; rows/s and counters in extra_info, with ``references`` the ratios to
    the per-option path and to the path without prefix sharing. The last round's counters."""
    if path == "per_option" and not hasattr(scorer, "score_batch_per_option"):
        pytest.skip(f"{type(scorer).__name__} has no per-option path")
    if path.endswith(UNSHARED) and not getattr(scorer, "shares_prefixes", False):
        pytest.skip(f"{type(scorer).__name__} shares no prompt prefixes: there is no unshared path to compare")
    fresh = []  # the latest round's copy only: each holds its own caches (up to 3 GiB, on the device)

    def setup():
        fresh[:] = [_fresh(scorer, path)]
        return (fresh[-1],), {}

    out = benchmark.pedantic(_synchronised(_score(path, rows), device), setup=setup, rounds=rounds, iterations=1)
    assert len(out) == len(rows) and all(len(lg) == len(r.options) for lg, r in zip(out, rows))
    stats = dict(getattr(fresh[-1], "stats", {}))
    if benchmark.stats:
        mean = benchmark.stats.stats.mean
        benchmark.extra_info.update(rows=len(rows), rows_per_s=round(len(rows) / mean, 2), stats=stats)
        if stats.get("tokens"):
            benchmark.extra_info["tokens_alone_per_computed"] = round(stats["tokens_alone"] / stats["tokens"], 2)
        if references and path != "per_option" and hasattr(scorer, "score_batch_per_option"):
            per_option = _seconds(scorer, "per_option", rows, device)
            benchmark.extra_info["per_option_rows_per_s"] = round(len(rows) / per_option, 2)
            benchmark.extra_info["ratio_to_per_option"] = round(per_option / mean, 2)
        if references and f"{path}{UNSHARED}" in PATHS and getattr(scorer, "shares_prefixes", False):
            unshared = _seconds(scorer, f"{path}{UNSHARED}", rows, device)
            benchmark.extra_info["unshared_rows_per_s"] = round(len(rows) / unshared, 2)
            benchmark.extra_info["ratio_to_unshared"] = round(unshared / mean, 2)
    return stats


@pytest.mark.parametrize("path", PATHS)
def test_scorer_throughput(benchmark, robustness, device, path):
    """rows/s of the one-pass batch path, the per-option batch path and predict with / without the prefix cache,
    the batch path and predict with the cache each with and without prefix sharing."""
    scorer = robustness.scorer(device)
    if answers_in_text(scorer):
        pytest.skip("a served model has no batch or predict path: test_served_throughput measures its requests")
    _measure(benchmark, scorer, _rows(robustness), path, device, rounds=3)


def test_served_throughput(benchmark, robustness, device):
    """Requests per second of a served model at --concurrency: the scorer benchmarks' rows, one request each."""
    scorer = robustness.scorer(device)
    if not answers_in_text(scorer):
        pytest.skip("the model is not served (--scorer openai): test_scorer_throughput measures its paths")
    rows = _rows(robustness)
    before = dict(scorer.stats)
    out = benchmark.pedantic(scorer.answers, args=(rows,), rounds=3, iterations=1)
    assert len(out) == len(rows) and all(a.text is not None for a in out)
    if benchmark.stats:
        requests = scorer.stats["requests"] - before["requests"]
        benchmark.extra_info.update(rows=len(rows), concurrency=scorer.concurrency, requests=requests,
                                    retries=scorer.stats["retries"] - before["retries"],
                                    requests_per_s=round(len(rows) / benchmark.stats.stats.mean, 2))


@pytest.mark.slow
@pytest.mark.parametrize("path", SHARED_PATHS)
def test_smolvlm_256m_shaped_throughput(benchmark, robustness, device, path, tmp_path_factory):
    """The SmolVLM-256M-shaped model (random weights, built from config) with its image splitting: photos of 17
    tiles with their text-side variants, with and without prefix sharing."""
    from laya_robustness.recipes.bench import TEXT_FAMILIES, build_256m_shaped, workload
    from laya_robustness.scoring import load_scorer

    root = tmp_path_factory.getbasetemp() / "smolvlm-256m-shaped-split"
    model = root if (root / "config.json").exists() else build_256m_shaped(root, split=True)
    started = time.perf_counter()
    scorer = load_scorer("hf", str(model), device=device, batch_size=robustness.settings.batch_size)
    load_s = time.perf_counter() - started
    rows = workload(SPLIT_PHOTOS, SPLIT_PHOTO_SIZE, families=TEXT_FAMILIES)
    assert len(rows) == 15 * SPLIT_PHOTOS and len({r.cluster for r in rows}) == SPLIT_PHOTOS
    stats = _measure(benchmark, scorer, rows, path, device, rounds=1, references=False)
    if path.endswith(UNSHARED):
        assert stats["prefixes"] == 0 and stats["tokens"] == stats["tokens_alone"]
    else:  # each photo's 1,088 image tokens run once, not once a row
        assert stats["prefixes"] == SPLIT_PHOTOS and stats["tokens_alone"] > 4 * stats["tokens"]
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
