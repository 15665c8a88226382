"""The HF scorer on the embedded checkpoint: both paths agree, and display order maps back to label order."""

import dataclasses

import numpy as np
import pytest

from laya_robustness.families import build_variants
from laya_robustness.scoring.prompt import user_text

PATH_TOLERANCE = 1e-4


def test_embedded_checkpoint_loads_through_from_pretrained(embedded_scorer):
    from transformers import Idefics3ForConditionalGeneration, Idefics3Processor

    assert isinstance(embedded_scorer.model, Idefics3ForConditionalGeneration)
    assert isinstance(embedded_scorer.processor, Idefics3Processor)
    hashes = embedded_scorer.identity["weights_sha256"]
    assert list(hashes) == ["model.safetensors"] and len(hashes["model.safetensors"]) == 64


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
