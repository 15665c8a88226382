"""Every supported architecture, as a tiny random checkpoint saved and loaded like a hub one.

On each: the prompt equals the processor's, every option's logit equals a plain forward of the
model on ``processor(...)`` outputs, the batch path (one pass), the per-option batch path and the
predict path with and without the prefix cache agree, a row does not depend on its batch
neighbours, display order maps back to label order, each distinct image is encoded once, and the
rows about one image run its prompt prefix once (all but PaliGemma) and score as each row alone.
"""

import dataclasses
import threading

import numpy as np
import pytest

from laya_robustness.families import build_variants
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES
from laya_robustness.run.pipeline.invariance import ConditionNotSupported, InvarianceRun, hostile_rows
from laya_robustness.scoring import load_scorer
from laya_robustness.rows import image_digest
from laya_robustness.scoring.prompt import user_text
from laya_robustness.recipes.tiny_checkpoints import ARCHITECTURES, build_checkpoint

TOLERANCE = 1e-4  # fp32 |dlogit|, as the invariance limits


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-checkpoints")
    return {arch: build_checkpoint(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="module", params=ARCHITECTURES)
def scorer(request, checkpoints):
    return load_scorer("hf", str(checkpoints[request.param]), batch_size=4)


@pytest.fixture(scope="module")
def rows(fixture_rows):
    base = fixture_rows["colour_choice"][:2] + fixture_rows["exists_yesno"][:1] + fixture_rows["context_choice"][:1]
    first, second = base[0], base[1]
    return base + [dataclasses.replace(first, row_id="two_images", images=first.images + second.images),
                   dataclasses.replace(first, row_id="text_only", images=())]


def _worst(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def _processor_inputs(scorer, row):
    """What ``processor(text=..., images=...)`` gives for the row's prompt (PaliGemma builds its own prefix)."""
    import torch

    adapter, processor = scorer.adapter, scorer.processor
    text = adapter.prompt_text(row)
    if adapter.name == "paligemma":
        if not row.images:
            return {"input_ids": torch.tensor([scorer.tokenizer(text, add_special_tokens=False)["input_ids"]])}
        text = processor.image_token * len(row.images) + user_text(row)
    images = {"images": list(row.images)} if row.images else {}
    enc = dict(processor(text=[text], return_tensors="pt", **images))
    ids = enc["input_ids"]
    bos = scorer.tokenizer.bos_token_id
    if ids.shape[1] > 1 and ids[0, 0] == ids[0, 1] == bos:  # Gemma 3: template and tokenizer both add <bos>
        enc["input_ids"] = ids[:, 1:]
    for unused in ("attention_mask", "labels", "token_type_ids", "mm_token_type_ids"):
        enc.pop(unused, None)
    return enc


def _reference_logits(scorer, row):
    """Each option's log-likelihood from a plain forward of the model on prompt + answer ids."""
    import torch

    adapter = scorer.adapter
    text = adapter.prompt_text(row)
    prompt = _processor_inputs(scorer, row)
    prompt_len = prompt["input_ids"].shape[1]
    out = []
    for option in row.shown_options:
        answer = adapter.tokenize_answer(adapter.answer_text(option, text))
        ids = torch.cat([prompt["input_ids"], torch.tensor([answer])], dim=1)
        enc = {**prompt, "input_ids": ids}
        if adapter.name == "paligemma":  # the prefix is bidirectional, the answer the causal suffix
            enc["token_type_ids"] = torch.tensor([[0] * prompt_len + [1] * len(answer)])
        if adapter.name == "gemma3":
            enc["token_type_ids"] = (ids == adapter.image_token_id).long()
        if adapter.name == "qwen2_vl":
            enc["mm_token_type_ids"] = (ids == adapter.image_token_id).int()
        with torch.inference_mode():
            logits = scorer.model(**enc).logits[0, prompt_len - 1:prompt_len - 1 + len(answer)]
        logp = torch.log_softmax(logits.float(), dim=-1)
        out.append(float(logp[torch.arange(len(answer)), torch.tensor(answer)].sum()))
    return np.asarray(out)


def test_loads_through_load_scorer_with_its_adapter_and_identity(scorer):
    identity = scorer.identity
    assert identity["architecture"] == scorer.model.config.model_type
    assert identity["weights_sha256"] and identity["adapter"] == scorer.adapter.name
    assert identity["prompt_format"] and "{option}" in identity["answer_format"]


def test_prompt_ids_equal_the_processors(scorer, rows):
    for row in rows:
        assert list(scorer.prepare(row).prompt.ids) == _processor_inputs(scorer, row)["input_ids"][0].tolist()


def test_logits_equal_a_plain_forward_of_each_option(scorer, rows):
    got = scorer.score_batch(rows)
    reference = [_reference_logits(scorer, r) for r in rows]
    assert _worst(got, reference) < TOLERANCE
    assert np.std(np.concatenate(got)) > 0.1  # the tiny model's logits differ between options and rows


def test_batch_predict_and_per_option_paths_agree(scorer, rows):
    batch = scorer.score_batch(rows)
    for other in (scorer.score_batch_per_option(rows), scorer.score_predict(rows, use_cache=True),
                  scorer.score_predict(rows, use_cache=False)):
        assert _worst(batch, other) < TOLERANCE


def test_a_rows_logits_do_not_depend_on_its_batch_neighbours(scorer, rows):
    neighbours = hostile_rows(rows)
    for row in rows[:3]:
        alone = scorer.score_batch([row])[0]
        crowded = scorer.score_batch([*neighbours[:2], row, *neighbours[2:]])[2]
        np.testing.assert_allclose(alone, crowded, atol=TOLERANCE, rtol=0)


def test_display_order_equals_physical_reordering(scorer, rows):
    source = rows[:2]
    variants = build_variants("option_order", source, seed=0)[:4]
    by_id = {r.row_id: r for r in source}
    physical = []
    for v in variants:
        row = by_id[v.group_id]
        physical.append(dataclasses.replace(row, options=tuple(row.options[i] for i in v.display_order),
                                            label=v.display_order.index(row.label), display_order=None))
    for v, shown, moved in zip(variants, scorer.score_batch(variants), scorer.score_batch(physical)):
        np.testing.assert_allclose(shown[list(v.display_order)], moved, atol=TOLERANCE, rtol=0)


def test_each_distinct_image_is_encoded_once(scorer, rows):
    fresh = scorer.replaced()  # empty caches
    source = [rows[0], rows[1], rows[2]]  # rows 0 and 1 are two questions about one image
    variants = build_variants("option_order", source, seed=0)
    fresh.score_batch(source + variants)
    fresh.score_predict(source)
    distinct = {image_digest(im) for r in source for im in r.images}
    assert len(distinct) == 2
    assert fresh.stats["vision_encodes"] == len(distinct)  # CPU: the predict path reuses the batch path's fp32
    assert fresh.stats["image_preprocess"] == len(distinct)
    assert fresh.stats["rows"] == 2 * len(source) + len(variants)


def _group_pixel_bytes(scorer, calls) -> dict:
    """Content key -> bytes of the processor's tensors, for every image group of these calls' rows."""
    from laya_robustness.scoring.cache import tensor_bytes

    groups = {tuple(image_digest(im) for im in g): g for call in calls for r in call
              for g in scorer.adapter.image_groups(r.images)}
    return {k: tensor_bytes(scorer.adapter.process_group(g)[0]) for k, g in groups.items()}


def test_each_image_is_preprocessed_once_when_the_pixels_outgrow_the_cache(scorer, rows):
    """With a pixel cache of two images, each call is cut into windows scored before the next is prepared,
    and a new question on an image whose pixels were dropped reuses the image's prompt layout: every image
    group is still preprocessed once, and the scores equal those of a scorer that keeps all pixels."""
    from laya_robustness.scoring.hf import HFVLMScorer

    calls = [rows, build_variants("shift", rows, seed=0), build_variants("option_order", rows, seed=0)]
    sizes = _group_pixel_bytes(scorer, calls)
    tight = HFVLMScorer(scorer.model, scorer.processor, batch_size=scorer.batch_size,
                        pixel_cache_bytes=2 * max(sizes.values()))
    roomy = scorer.replaced()
    for call in calls:
        for a, b in zip(tight.score_batch(call), roomy.score_batch(call), strict=True):
            np.testing.assert_allclose(a, b, atol=TOLERANCE, rtol=0)
    shift_groups = _group_pixel_bytes(scorer, calls[1:2])
    assert sum(shift_groups.values()) > tight._pixels.max_bytes  # one call's pixels outgrow the cache
    assert tight._pixels.evictions > 0
    assert tight.stats["image_preprocess"] == roomy.stats["image_preprocess"] == len(sizes)
    layer_tight = HFVLMScorer(scorer.model, scorer.processor, batch_size=scorer.batch_size,
                              pixel_cache_bytes=2 * max(sizes.values()))
    for a, b in zip(layer_tight.layer_states(calls[1]), roomy.layer_states(calls[1]), strict=True):
        np.testing.assert_allclose(a, b, atol=TOLERANCE, rtol=0)
    assert layer_tight.stats["image_preprocess"] == len(shift_groups)


def test_source_features_outlive_a_pass_of_image_variants(scorer, rows):
    """A feature store with room for twice the source images' features: after the sources, their option_order
    variants and an image family whose new images outgrow the store, another text family encodes nothing (the
    sources were asked for twice, so the variants' pass cycles through the store's probation around them)."""
    from laya_robustness.scoring.hf import HFVLMScorer

    probe = scorer.replaced()
    probe.score_batch(rows)
    source_bytes = probe._feature_store.nbytes
    shifted = build_variants("shift", rows, seed=0)
    probe.score_batch(shifted)
    tight = HFVLMScorer(scorer.model, scorer.processor, batch_size=scorer.batch_size,
                        feature_cache_bytes=2 * source_bytes)
    assert probe._feature_store.nbytes > tight._feature_store.max_bytes  # the shifted images alone outgrow it
    for call in (rows, build_variants("option_order", rows, seed=0), shifted):
        tight.score_batch(call)
    assert tight._feature_store.evictions > 0
    encoded = tight.stats["vision_encodes"]
    text = build_variants("text", rows, seed=0)
    assert any(r.images for r in text)
    for a, b in zip(tight.score_batch(text), probe.score_batch(text), strict=True):
        np.testing.assert_allclose(a, b, atol=TOLERANCE, rtol=0)
    assert tight.stats["vision_encodes"] == encoded


def test_a_vision_forward_takes_at_most_its_bound_of_pixels(scorer, rows):
    """With the bound set to the largest image group's pixel values, every vision forward holds one group or
    groups within the bound; the scores equal an unbounded scorer's, each image is still encoded once."""
    from laya_robustness.scoring.hf import HFVLMScorer, pixel_values

    calls = [rows, build_variants("shift", rows, seed=0)]
    values = {k: pixel_values(scorer.adapter.process_group(g)[0])
              for call in calls for r in call for g in scorer.adapter.image_groups(r.images)
              for k in [tuple(image_digest(im) for im in g)]}
    bounded, unbounded = (HFVLMScorer(scorer.model, scorer.processor, batch_size=scorer.batch_size)
                          for _ in range(2))
    bounded.vision_batch_values, unbounded.vision_batch_values = max(values.values()), 1 << 62
    seen = []
    image_features = bounded.adapter.image_features

    def recorded(inputs, images_per_group):
        seen.append((pixel_values(inputs), len(images_per_group)))
        return image_features(inputs, images_per_group)

    bounded.adapter.image_features = recorded
    for call in calls:
        for a, b in zip(bounded.score_batch(call), unbounded.score_batch(call), strict=True):
            np.testing.assert_allclose(a, b, atol=TOLERANCE, rtol=0)
    assert seen and all(n == 1 or v <= bounded.vision_batch_values for v, n in seen), seen
    assert bounded.stats["vision_forwards"] > unbounded.stats["vision_forwards"]
    assert bounded.stats["vision_encodes"] == unbounded.stats["vision_encodes"] == sum(len(k) for k in values)


def test_preprocessing_ahead_on_threads_changes_nothing_but_time(scorer, rows):
    """Preprocessing image groups ahead of their rows (on for large images; forced here for all) gives the
    same scores and counters as preprocessing each in turn, with a roomy or a two-image pixel cache."""
    from laya_robustness.scoring.hf import HFVLMScorer

    calls = [rows, build_variants("shift", rows, seed=0), build_variants("option_order", rows, seed=0)]
    two_images = 2 * max(_group_pixel_bytes(scorer, [rows]).values())
    for pixel_cache_bytes in (1 << 30, two_images):
        in_turn, ahead = (HFVLMScorer(scorer.model, scorer.processor, batch_size=scorer.batch_size,
                                      pixel_cache_bytes=pixel_cache_bytes) for _ in range(2))
        in_turn.prefetch, ahead.prefetch = False, True
        threads = []
        process_group = ahead.adapter.process_group

        def recorded(group):
            threads.append(threading.current_thread().name)
            return process_group(group)

        ahead.adapter.process_group = recorded
        for call in calls:
            for a, b in zip(ahead.score_batch(call), in_turn.score_batch(call), strict=True):
                np.testing.assert_array_equal(a, b)
        assert ahead.stats == in_turn.stats and not ahead._pending
        assert sum(name.startswith("laya-preprocess") for name in threads) >= len(rows) - 1  # it did run ahead


def test_rows_about_one_image_run_its_prefix_once_and_score_as_each_row_alone(scorer, rows):
    """The rows and their option_order and text variants in one call, then again. Each row's logits equal the row
    alone over its whole prompt, on the batch path and on predict with the cache (vs without). Where the
    architecture shares prefixes (all but PaliGemma's prefix-LM), each image's prefix runs once: the second call
    runs no prefix and no vision encode, reads every prefix from the store and gives the same logits bit for bit."""
    fresh = scorer.replaced()
    call = rows + build_variants("option_order", rows, seed=0) + build_variants("text", rows, seed=0)
    shared = fresh.score_batch(call)
    assert _worst(shared, [scorer.score_batch_unshared([r])[0] for r in call]) < TOLERANCE
    assert _worst(fresh.score_predict(call), scorer.score_predict(call, use_cache=False)) < TOLERANCE
    prefixed = [fresh.prepare(r).prefix for r in call]
    run = InvarianceRun(scorer, rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    if scorer.adapter.name == "paligemma":
        assert not fresh.shares_prefixes and fresh.identity["prefix_sharing"].startswith("none: the prompt attends")
        assert not any(prefixed) and fresh.stats["prefixes"] == 0
        assert fresh.stats["tokens"] >= fresh.stats["tokens_alone"]  # predict without the cache runs more
        with pytest.raises(ConditionNotSupported, match="prefix-LM"):
            run.run("shared_prefix_vs_alone")
        return
    distinct = {p for p in prefixed if p is not None}
    assert fresh.shares_prefixes and fresh.identity["prefix_sharing"].startswith("kv-cache")
    assert prefixed[len(rows) - 1] is None and prefixed[len(rows) - 2] is not None  # text-only whole; two images shared
    assert fresh.stats["prefixes"] == len(distinct) < len(call) // 4
    before = dict(fresh.stats)
    again = fresh.score_batch(call)
    assert all(np.array_equal(a, b) for a, b in zip(shared, again, strict=True))
    assert fresh.stats["prefixes"] == before["prefixes"] and fresh.stats["vision_encodes"] == before["vision_encodes"]
    assert fresh.stats["prefix_hits"] - before["prefix_hits"] == sum(p is not None for p in prefixed)
    assert fresh.stats["tokens"] - before["tokens"] < 0.8 * (fresh.stats["tokens_alone"] - before["tokens_alone"])
    stats = run.run("shared_prefix_vs_alone")
    assert stats["precision"] == "fp32" and stats["flips"] == 0 and stats["rows"] == len(rows)
    assert stats["max_abs_dp"] < 1e-5 and stats["max_abs_dlogit"] < TOLERANCE
