"""The invariance conditions the scorer layer adds or changes, on the embedded checkpoint and on fakes."""

import numpy as np
import pytest

from laya_robustness.run.pipeline.invariance import CONDITION_NAMES, ConditionNotSupported, InvarianceRun
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES
from laya_robustness.scoring.base import to_label_order


@pytest.fixture(scope="module")
def rows(fixture_rows):
    return [r for name in ("colour_choice", "count_choice", "exists_yesno") for r in fixture_rows[name][:3]]


def test_one_pass_equals_per_option_scoring_within_fp32_rounding(embedded_scorer, rows):
    run = InvarianceRun(embedded_scorer, rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    stats = run.run("one_pass_vs_per_option")
    assert "one_pass_vs_per_option" in CONDITION_NAMES
    assert stats["precision"] == "fp32" and stats["rows"] == len(rows)
    assert stats["flips"] == 0 and stats["max_abs_dlogit"] < 1e-4 and stats["max_abs_dp"] < 1e-5


class _NoPerOption:
    identity: dict = {}

    def score_batch(self, rows):
        return [to_label_order(r, np.arange(len(r.options), dtype=float)) for r in rows]

    def score_predict(self, rows, use_cache=True):
        return self.score_batch(rows)


def test_a_scorer_without_the_per_option_path_cannot_run_the_condition(rows):
    run = InvarianceRun(_NoPerOption(), rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    with pytest.raises(ConditionNotSupported, match="score_batch_per_option"):
        run.run("one_pass_vs_per_option")


class _Wrong(_NoPerOption):
    """Its one pass differs from its per-option scores: the condition must see it."""

    def score_batch_per_option(self, rows):
        return [lg + 1e-3 for lg in self.score_batch(rows)]


def test_the_condition_reports_a_one_pass_that_differs(rows):
    stats = InvarianceRun(_Wrong(), rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES)).run(
        "one_pass_vs_per_option")
    assert stats["max_abs_dlogit"] == pytest.approx(1e-3) and not stats["bitwise"]


def test_bf16_weights_run_on_their_own_copies_and_leave_the_scorer_alone(embedded_scorer, rows):
    import torch

    before = embedded_scorer.score_batch(rows[:2])
    run = InvarianceRun(embedded_scorer, rows[:2], batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    stats = run.run("bf16_weights")
    assert stats["precision"] == "bf16" and 0 < stats["max_abs_dlogit"] < 1.0
    assert next(embedded_scorer.model.parameters()).dtype == torch.float32 and embedded_scorer.precision == "auto"
    after = embedded_scorer.score_batch(rows[:2])
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


def test_shared_prefixes_equal_each_row_alone_within_fp32_rounding(embedded_scorer, rows):
    """The rows with a prefix neighbour each in one call: every row is scored against its image's stored prefix."""
    hits = embedded_scorer.stats["prefix_hits"]
    stats = InvarianceRun(embedded_scorer, rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES)).run(
        "shared_prefix_vs_alone")
    assert "shared_prefix_vs_alone" in CONDITION_NAMES
    assert stats["precision"] == "fp32" and stats["rows"] == len(rows)
    assert stats["flips"] == 0 and stats["max_abs_dlogit"] < 1e-4 and stats["max_abs_dp"] < 1e-5
    assert embedded_scorer.stats["prefix_hits"] - hits >= len(rows)  # the rows and neighbours shared their prefixes


def test_a_scorer_that_shares_no_prefixes_cannot_run_the_condition(embedded_scorer, rows):
    run = InvarianceRun(_NoPerOption(), rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    with pytest.raises(ConditionNotSupported, match="shares no prompt prefixes"):
        run.run("shared_prefix_vs_alone")
    off = embedded_scorer.replaced(prefix_cache_bytes=0)
    assert not off.shares_prefixes and off.identity["prefix_sharing"].startswith("none: no prefix store")
    with pytest.raises(ConditionNotSupported, match="no prefix store"):
        InvarianceRun(off, rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES)).run("shared_prefix_vs_alone")


class _WrongShared(_NoPerOption):
    """Its shared-prefix scores differ from each row alone: the condition must see it."""

    shares_prefixes = True

    def score_batch_unshared(self, rows):
        return [lg - 2e-3 for lg in self.score_batch(rows)]


def test_the_condition_reports_shared_prefixes_that_differ(rows):
    stats = InvarianceRun(_WrongShared(), rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES)).run(
        "shared_prefix_vs_alone")
    assert stats["max_abs_dlogit"] == pytest.approx(2e-3) and not stats["bitwise"]
