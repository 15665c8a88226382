"""The HF scorer on the embedded checkpoint: both paths agree, and display order maps back to label order."""

import dataclasses

import numpy as np
import pytest

from laya_robustness.families import build_variants
from laya_robustness.scoring.prompt import user_text

from helpers.paths import EMBEDDED_MODEL
from helpers.weights import tensors_digest

PATH_TOLERANCE = 1e-4


def test_embedded_checkpoint_loads_through_from_pretrained(embedded_scorer):
    from transformers import Idefics3ForConditionalGeneration, Idefics3Processor

    assert isinstance(embedded_scorer.model, Idefics3ForConditionalGeneration)
    assert isinstance(embedded_scorer.processor, Idefics3Processor)
    assert embedded_scorer.identity["weights_sha256"] == {"tensors": tensors_digest(EMBEDDED_MODEL)}


def test_batch_and_predict_paths_agree_on_every_fixture_row(embedded_scorer, fixture_rows):
    rows = [r for name in sorted(fixture_rows) for r in fixture_rows[name]]
    assert len(rows) >= 1000
    batch = embedded_scorer.score_batch(rows)
    predict = embedded_scorer.score_predict(rows)
    worst = max(float(np.abs(b - p).max()) for b, p in zip(batch, predict))
    assert worst < PATH_TOLERANCE, f"max |logit(batch) - logit(predict)| = {worst}"
    assert len({tuple(np.round(b, 3)) for b in batch}) > len(rows) // 2  # not a constant output


def test_prefix_cache_matches_full_forward(embedded_scorer, fixture_rows):
    rows = fixture_rows["colour_choice"][:8] + fixture_rows["exists_yesno"][:8]
    cached = embedded_scorer.score_predict(rows, use_cache=True)
    full = embedded_scorer.score_predict(rows, use_cache=False)
    assert max(float(np.abs(a - b).max()) for a, b in zip(cached, full)) < PATH_TOLERANCE


@pytest.mark.parametrize("dataset", ["colour_choice", "count_choice", "exists_yesno"])
def test_display_order_equals_physical_reordering(embedded_scorer, fixture_rows, dataset):
    rows = fixture_rows[dataset][:6]
    variants = build_variants("option_order", rows, seed=0)
    assert variants and all(v.display_order is not None for v in variants)
    by_row = {r.row_id: r for r in rows}
    physical = []
    for v in variants:
        source = by_row[v.group_id]
        order = v.display_order
        physical.append(dataclasses.replace(source, options=tuple(source.options[i] for i in order),
                                            label=order.index(source.label), display_order=None))
    assert [user_text(v) for v in variants] == [user_text(p) for p in physical]
    shown = embedded_scorer.score_batch(variants)
    moved = embedded_scorer.score_batch(physical)
    for v, p, a, b in zip(variants, physical, shown, moved):
        # logits of the variant are in label order; the physical row's are in its own (display) order
        np.testing.assert_allclose(a[list(v.display_order)], b, atol=1e-5)
        assert int(np.argmax(a)) == v.label or int(np.argmax(b)) != p.label
        assert v.options[v.label] == p.options[p.label]


def test_text_only_and_two_image_rows_score(embedded_scorer, fixture_rows):
    row = fixture_rows["colour_choice"][0]
    other = fixture_rows["colour_choice"][5]
    rows = [row, dataclasses.replace(row, images=()), dataclasses.replace(row, images=row.images + other.images)]
    batch = embedded_scorer.score_batch(rows)
    alone = [embedded_scorer.score_batch([r])[0] for r in rows]
    predict = embedded_scorer.score_predict(rows)
    for b, a, p in zip(batch, alone, predict):
        assert np.all(np.isfinite(b)) and b.shape == (4,)
        np.testing.assert_allclose(b, a, atol=1e-5)
        np.testing.assert_allclose(b, p, atol=PATH_TOLERANCE)
    assert not np.allclose(batch[0], batch[1])  # removing the image changes the answer's scores


def _plain_forward(scorer, row):
    """The model's own forward on the processor's outputs for the row's prompt: logits and hidden states."""
    import torch

    text = scorer.adapter.prompt_text(row)
    enc = scorer.processor(text=[text], images=[list(row.images)], return_tensors="pt")
    with torch.inference_mode():
        out = scorer.model(input_ids=enc["input_ids"], pixel_values=enc["pixel_values"],
                           pixel_attention_mask=enc["pixel_attention_mask"], output_hidden_states=True)
    return enc["input_ids"][0], out


def test_generate_starts_with_the_models_own_greedy_token_and_is_deterministic(embedded_scorer, fixture_rows):
    rows = fixture_rows["colour_choice"][:3]
    for row in rows:
        ids, out = _plain_forward(embedded_scorer, row)
        first = embedded_scorer.tokenizer.decode([int(out.logits[0, -1].argmax())], skip_special_tokens=True)
        assert embedded_scorer.generate([row], max_new_tokens=1) == [first]
    answers = embedded_scorer.generate(rows, max_new_tokens=8)
    assert answers == embedded_scorer.generate(rows, max_new_tokens=8)
    assert sum(a.strip() == r.options[r.label] for a, r in zip(answers, rows)) >= 2  # the trained model answers


def test_generate_takes_open_answer_rows_without_options(embedded_scorer, fixture_rows):
    row = dataclasses.replace(fixture_rows["colour_choice"][0], options=(), label=-1)
    assert user_text(row) == row.question
    (answer,) = embedded_scorer.generate([row], max_new_tokens=4)
    assert isinstance(answer, str)


def test_layer_states_are_the_models_hidden_states_at_the_last_prompt_token(embedded_scorer, fixture_rows):
    rows = fixture_rows["count_choice"][:2] + fixture_rows["exists_yesno"][:1]
    states = embedded_scorer.layer_states(rows)
    layers = embedded_scorer.model.config.text_config.num_hidden_layers
    for row, state in zip(rows, states):
        _, out = _plain_forward(embedded_scorer, row)
        assert state.shape == (layers + 1, embedded_scorer.model.config.text_config.hidden_size)
        assert state.dtype == np.float32
        reference = np.stack([h[0, -1].numpy() for h in out.hidden_states])
        np.testing.assert_allclose(state, reference, atol=1e-4, rtol=0)


def test_a_feature_store_too_small_to_hold_anything_changes_nothing_but_the_encode_count(embedded_scorer,
                                                                                          fixture_rows):
    from laya_robustness.scoring.hf import HFVLMScorer

    rows = fixture_rows["colour_choice"][:4]
    # no prefix store either: the stored prefixes would let the second call skip the vision encoder altogether
    small = HFVLMScorer(embedded_scorer.model, embedded_scorer.processor, batch_size=2, feature_cache_bytes=0,
                        prefix_cache_bytes=0)
    first = small.score_batch(rows)
    second = small.score_batch(rows)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    np.testing.assert_allclose(np.concatenate(first), np.concatenate(embedded_scorer.score_batch(rows)), atol=1e-5)
    kept = embedded_scorer.replaced()
    kept.score_batch(rows)
    kept.score_batch(rows)
    distinct = len({r.cluster for r in rows})
    assert kept.stats["vision_encodes"] == distinct  # once per image, the second call from the store
    assert small.stats["vision_encodes"] >= 2 * distinct  # nothing kept: both calls encode


def test_a_prefix_store_too_small_for_one_prefix_changes_nothing_but_the_prefixes_run(embedded_scorer, fixture_rows):
    """Nothing can be kept: every forward runs the prefixes its rows need, once each, and the logits are those of a
    scorer that keeps them all (which runs each image's prefix once)."""
    from laya_robustness.families import build_variants
    from laya_robustness.scoring.hf import HFVLMScorer

    source = fixture_rows["colour_choice"][:6]
    rows = source + build_variants("option_order", source, seed=0)
    tiny = HFVLMScorer(embedded_scorer.model, embedded_scorer.processor, batch_size=4, prefix_cache_bytes=1)
    roomy = HFVLMScorer(embedded_scorer.model, embedded_scorer.processor, batch_size=4)
    for a, b in zip(tiny.score_batch(rows), roomy.score_batch(rows), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    distinct = len({r.cluster for r in source})
    assert tiny.shares_prefixes and len(tiny._prefixes) == 0 and tiny.stats["prefix_hits"] == 0
    assert roomy.stats["prefixes"] == distinct < tiny.stats["prefixes"] <= -(-len(rows) // 4) * distinct
    assert roomy.stats["prefix_hits"] > 0  # later forwards read their image's prefix from the store


def test_shared_buckets_sort_by_the_tokens_after_the_prefix_and_keep_rows_without_one_apart():
    from laya_robustness.scoring import layout
    from laya_robustness.scoring.hf import HFVLMScorer, PreparedRow

    def row(n: int, prefix_length: int = 0) -> PreparedRow:
        prompt = layout.Prompt(tuple(range(n)), np.arange(n)[None], np.zeros(n, np.int64))
        return PreparedRow(f"r{n}", prompt, (), ((7, 8),), prefix_length, ("p", n) if prefix_length else None)

    # whole sequences (prompt + 1 option token): 10, 6, 8, 7 and 13 tokens; after the prefix: 4, -, 7, -, 3
    prepared = [row(9, 6), row(5), row(7, 1), row(6), row(12, 10)]
    assert HFVLMScorer._buckets(prepared, 2) == [[1, 3], [2, 0], [4]]
    assert HFVLMScorer._buckets(prepared, 2, share=True) == [[4, 0], [2], [1, 3]]


def test_a_call_of_rows_with_and_without_images_runs_one_forward_a_bucket(embedded_scorer, fixture_rows):
    """Rows without an image have no prefix to share: they are bucketed apart from the rows that share one, so no
    bucket runs two forwards; the logits are those of the unshared path."""
    from laya_robustness.scoring.hf import HFVLMScorer

    with_images = fixture_rows["colour_choice"][:3]
    rows = [r for pair in zip(with_images, build_variants("text_only", with_images, seed=0)) for r in pair]
    fresh = HFVLMScorer(embedded_scorer.model, embedded_scorer.processor, batch_size=4)
    prepared = [fresh.prepare(r) for r in rows]
    assert sum(bool(p.prefix) for p in prepared) == 3
    for a, b in zip(fresh.score_batch(rows), embedded_scorer.score_batch_unshared(rows), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert fresh.stats["prefixes"] == len({r.cluster for r in with_images})
    # one bucket of the 3 rows with a prefix (after one forward of their prefixes) and one of the 3 without; mixed
    # in buckets of 4, a bucket would hold both kinds and run two forwards (4 in all)
    assert fresh.stats["forwards"] == 1 + 1 + 1


def test_new_images_prefixes_run_ahead_in_forwards_of_a_buckets_tokens(embedded_scorer, fixture_rows):
    """Rows about new images (the image family's variants): the buckets' prefixes run ahead, as many a forward as
    fit a bucket of the call's longest rows, so the call runs its buckets and a few prefix forwards, not two
    forwards a bucket; each row's logits are those of its whole prompt."""
    from laya_robustness.scoring.hf import HFVLMScorer

    rows = build_variants("image", fixture_rows["colour_choice"][:8], seed=0)
    fresh = HFVLMScorer(embedded_scorer.model, embedded_scorer.processor, batch_size=4)
    shared = fresh.score_batch(rows)
    for a, b in zip(shared, embedded_scorer.score_batch_unshared(rows), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    prepared = [fresh.prepare(r) for r in rows]
    lengths = {p.prefix_length for p in prepared}
    distinct = len({p.prefix for p in prepared})
    assert len(lengths) == 1 and all(p.prefix for p in prepared) and distinct > len(rows) // 2
    per_forward = 4 * max(p.alone_tokens for p in prepared) // lengths.pop()
    buckets = -(-len(rows) // 4)
    assert 4 < per_forward < distinct  # more than a bucket's prefixes a forward, and more than one forward
    assert fresh.stats["prefixes"] == distinct
    assert fresh.stats["forwards"] == buckets + -(-distinct // per_forward) < 2 * buckets
    first: dict = {}
    bucket_of = {i: j for j, bucket in enumerate(fresh._buckets(prepared, 4, share=True)) for i in bucket}
    for i in sorted(bucket_of, key=bucket_of.get):
        first.setdefault(prepared[i].prefix, bucket_of[i])
    # a hit: a row of a later bucket than the one its prefix first ran for
    assert fresh.stats["prefix_hits"] == sum(first[p.prefix] != bucket_of[i] for i, p in enumerate(prepared)) > 0
