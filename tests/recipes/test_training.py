"""The embedded checkpoint's recipe is deterministic: a few steps twice give byte-identical weights."""

import hashlib
import json

from laya_robustness.recipes.train_smolvlm import train


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_few_recipe_steps_twice_give_identical_weights(tmp_path):
    first = train(tmp_path / "a", steps=3, rows_per_set=8, log_every=0)
    second = train(tmp_path / "b", steps=3, rows_per_set=8, log_every=0)
    weights_a, weights_b = tmp_path / "a" / "model.safetensors", tmp_path / "b" / "model.safetensors"
    assert _sha(weights_a) == _sha(weights_b)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert first["parameters"] == second["parameters"] > 100_000
    record = json.loads((tmp_path / "a" / "training_record.json").read_text())
    assert record["steps"] == 3 and record["threads"] == 2


def test_training_changes_the_weights(tmp_path):
    train(tmp_path / "one", steps=1, rows_per_set=8, log_every=0)
    train(tmp_path / "three", steps=3, rows_per_set=8, log_every=0)
    assert _sha(tmp_path / "one" / "model.safetensors") != _sha(tmp_path / "three" / "model.safetensors")
