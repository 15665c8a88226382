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


def test_what_moved_names_the_fingerprints_then_each_headline_against_its_interval():
    from laya_robustness.pytest_plugin.snapshot import snapshot_changes

    cell = {"acc": 0.8, "acc_ci": [0.7, 0.9], "delta": -0.1, "delta_ci": [-0.2, 0.0], "flip": 0.1,
            "flip_ci": [0.05, 0.15]}
    before = {"fingerprints": {"weights": "aaaa1111", "rows": "bbbb2222"},
              "families": {"text": {"a": dict(cell)}}}
    after = {"fingerprints": {"weights": "cccc3333", "rows": "bbbb2222"},
             "families": {"text": {"a": {**cell, "acc": 0.85, "flip": 0.3}}}}
    assert snapshot_changes(before, after) == [
        "the weights: fingerprint aaaa1111 -> cccc3333",
        "text/a acc: 0.8000 -> 0.8500 (within its 95% interval [0.7000, 0.9000])",
        "text/a flip: 0.1000 -> 0.3000 (BEYOND its 95% interval [0.0500, 0.1500])",
    ]
    assert snapshot_changes(before, before) == []
