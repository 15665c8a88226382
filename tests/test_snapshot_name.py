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
