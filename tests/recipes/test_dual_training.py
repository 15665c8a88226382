"""The tiny CLIP's tokenizer is CLIP's own vocabulary, and its recipe is deterministic."""

import gzip
import hashlib
import json

from laya_robustness.recipes.tiny_clip import BOS, EOS, N_MERGES, VOCAB_SIZE, bytes_to_unicode, clip_vocabulary, vocabulary_from
from laya_robustness.recipes.train_clip import train

from helpers.paths import ROOT

EMBEDDED_CLIP = ROOT / "laya_fixtures" / "tiny-clip"


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_clip_vocabulary_layout_on_a_small_merges_file(tmp_path):
    path = tmp_path / "bpe.txt.gz"
    path.write_bytes(gzip.compress("#version: 0.2\nt h\nth e</w>\na b\nunused line\n".encode("utf-8")))
    vocab, merges = clip_vocabulary(path, n_merges=3)
    byte_chars = list(bytes_to_unicode().values())
    assert len(byte_chars) == len(set(byte_chars)) == 256 and bytes_to_unicode()[ord("a")] == "a"
    assert vocab["!"] == 0 and vocab["!</w>"] == 256 and vocab[byte_chars[255] + "</w>"] == 511
    assert [vocab["th"], vocab["the</w>"], vocab["ab"], vocab[BOS], vocab[EOS]] == [512, 513, 514, 515, 516]
    assert merges == ["t h", "th e</w>", "a b"] and len(vocab) == 517


def test_the_committed_vocabulary_is_clips():
    vocab, merges = vocabulary_from(EMBEDDED_CLIP)
    assert len(vocab) == VOCAB_SIZE and len(merges) == N_MERGES
    assert (vocab[BOS], vocab[EOS]) == (49406, 49407)
    from laya_robustness.recipes.tiny_clip import build_tokenizer

    # OpenAI CLIP's ids for this sentence, as every CLIP tokenizer gives them
    assert build_tokenizer(vocab, merges)("a photo of a cat")["input_ids"] == [49406, 320, 1125, 539, 320, 2368, 49407]


def test_a_few_recipe_steps_twice_give_identical_weights(tmp_path):
    import torch

    threads = torch.get_num_threads()
    first = train(tmp_path / "a", steps=3, n_images=16, log_every=0)
    second = train(tmp_path / "b", steps=3, n_images=16, log_every=0)
    assert torch.get_num_threads() == threads  # the recipe's pinned thread count is not left behind
    assert _sha(tmp_path / "a" / "model.safetensors") == _sha(tmp_path / "b" / "model.safetensors")
    for name in ("vocab.json", "merges.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (EMBEDDED_CLIP / name).read_bytes()
    assert not (tmp_path / "a" / "tokenizer.json").exists()
    assert first["parameters"] == second["parameters"] == 883_905
    record = json.loads((tmp_path / "a" / "training_record.json").read_text())
    assert record["steps"] == 3 and record["threads"] == 1


def test_training_changes_the_weights(tmp_path):
    train(tmp_path / "one", steps=1, n_images=16, log_every=0)
    train(tmp_path / "three", steps=3, n_images=16, log_every=0)
    assert _sha(tmp_path / "one" / "model.safetensors") != _sha(tmp_path / "three" / "model.safetensors")
