"""The summary snapshot's name: one per device kind and scoring, the default scoring unnamed."""

from types import SimpleNamespace

import pytest

from laya_robustness.pytest_plugin.snapshot import device_kind, scoring_label


def settings(**changes):
    base = {"scoring_path": "batch", "precision": "auto", "batch_size": 16, "attn_implementation": "eager"}
    return SimpleNamespace(**{**base, **changes})


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps"])
def test_the_default_scoring_adds_nothing_to_the_name(device):
    assert scoring_label(settings(), device) == ""


@pytest.mark.parametrize(("device", "precision", "label"), [
    ("cpu", "fp32", ""), ("cpu", "bf16", ".bf16"), ("cuda", "bf16", ""), ("cuda", "fp32", ".fp32"),
    ("cuda:1", "fp32", ".fp32"), ("mps", "auto", ""),
])
def test_a_batch_precision_other_than_the_devices_own_is_named(device, precision, label):
    assert scoring_label(settings(precision=precision), device) == label


def test_the_predict_path_is_named_whatever_the_precision():
    """The predict path runs in fp32: --precision does not change it, so it does not split its snapshots."""
    assert {scoring_label(settings(scoring_path="predict", precision=p), d)
            for p in ("auto", "fp32", "bf16") for d in ("cpu", "cuda")} == {".predict"}


def test_every_changed_setting_is_named_in_order():
    assert scoring_label(settings(batch_size=8, attn_implementation="sdpa"), "cpu") == ".b8-sdpa"
    assert scoring_label(settings(scoring_path="predict", batch_size=4), "cpu") == ".predict-b4"
    assert scoring_label(settings(attn_implementation="flash_attention_2", precision="bf16"), "cpu") == \
        ".bf16-flash_attention_2"


@pytest.mark.parametrize(("device", "kind"), [("cpu", "cpu"), ("cuda", "gpu"), ("cuda:3", "gpu"), ("mps", "mps")])
def test_devices_are_named_by_kind(device, kind):
    assert device_kind(device) == kind


def test_another_scorer_is_named_first():
    """A served model answers in text: its numbers differ from an in-process scorer's by construction."""
    assert scoring_label(SimpleNamespace(**{**vars(settings()), "scorer": "openai"}), "cpu") == ".openai"
    assert scoring_label(SimpleNamespace(**{**vars(settings(scoring_path="predict")), "scorer": "pkg.mod:make"}),
                         "cpu") == ".pkg_mod_make-predict"


def test_what_moved_names_the_fingerprints_then_each_headline_furthest_beyond_its_interval_first():
    from laya_robustness.pytest_plugin.snapshot import snapshot_changes

    before = {"fingerprints": {"weights": "aaaa1111", "rows": "bbbb2222"},
              "headlines": {"text/a": "acc 0.800 [0.700, 0.900]; delta -0.100 [-0.200, 0.000]; flip 0.100 [0.050, 0.150]",
                        "text/b": "acc 0.500 [0.400, 0.600]; flip 0.200 [0.100, 0.300]",
                        "image/a": "acc 0.700"}}
    after = {"fingerprints": {"weights": "cccc3333", "rows": "bbbb2222"},
             "headlines": {"text/a": "acc 0.850 [0.750, 0.950]; delta -0.100 [-0.200, 0.000]; flip 0.300 [0.200, 0.400]",
                       "text/b": "acc 0.750 [0.650, 0.850]; flip 0.2004 [0.100, 0.300]",
                       "image/a": "acc 0.650", "image_shuffle/a": "acc 0.300 [0.200, 0.400]"}}
    # a move below review precision (text/b flip 0.2000 -> 0.2004) is no change
    assert snapshot_changes(before, after) == [
        "the weights: fingerprint aaaa1111 -> cccc3333",
        "image_shuffle/a acc: new",
        "text/a flip: 0.100 -> 0.300 (BEYOND its 95% interval [0.050, 0.150], 4.0 half-widths)",
        "text/b acc: 0.500 -> 0.750 (BEYOND its 95% interval [0.400, 0.600], 2.5 half-widths)",
        "text/a acc: 0.800 -> 0.850 (within its 95% interval [0.700, 0.900], 0.5 half-widths)",
        "image/a acc: 0.700 -> 0.650 (no interval)",
    ]
    assert snapshot_changes(before, before) == []


def test_a_cell_is_one_line_read_back_as_its_headlines_and_an_earlier_snapshot_still_compares():
    from laya_robustness.pytest_plugin.snapshot import cell_headlines, cell_lines, snapshot_changes

    summary = {"families": {"text": {"a": {"acc": 0.8125, "acc_ci": [0.70004, 0.9], "delta": -0.0, "flip": 0.1,
                                           "flip_ci": [0.05, 0.15], "ece": 0.12345}}}}
    lines = cell_lines(summary)
    assert lines == {"text/a": "acc 0.812 [0.700, 0.900]; delta 0.000; flip 0.100 [0.050, 0.150]"}
    assert cell_headlines(lines) == {("text", "a", "acc"): (0.812, [0.7, 0.9]), ("text", "a", "delta"): (0.0, None),
                                     ("text", "a", "flip"): (0.1, [0.05, 0.15])}
    # a snapshot of the earlier format (the whole summary) against one of this format: only what moved
    earlier = {"fingerprints": {}, **summary}
    assert snapshot_changes(earlier, {"fingerprints": {}, "headlines": lines}) == []
    assert snapshot_changes(earlier, {"fingerprints": {}, "headlines": {"text/a": "acc 0.900 [0.800, 1.000]"}})[0] == \
        "text/a delta: gone"
