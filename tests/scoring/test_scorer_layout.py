"""Sequence layouts and the scorer's stores, against plain-loop references and hand-computed examples."""

import doctest

import numpy as np
import pytest
from PIL import Image

from laya_robustness.scoring import cache, layout, prefixes
from laya_robustness.rows import image_digest
from laya_robustness.scoring.cache import ByteLRU, SegmentedLRU
from laya_robustness.scoring.layout import Prompt, after_prefix, allowed, collate, pack
from laya_robustness.scoring.prefixes import shared_length


def _prompt(n, blocks=None):
    return Prompt(ids=tuple(range(10, 10 + n)), positions=np.arange(n)[None],
                  blocks=np.asarray(blocks if blocks is not None else [-1] * n))


def _reference_allowed(prompt_len, option_lens, blocks, window=None):
    """Who may attend to whom, from the definition: each option as if it were alone after the prompt."""
    tokens = [("p", i) for i in range(prompt_len)]
    for j, n in enumerate(option_lens, start=1):
        tokens += [(j, t) for t in range(n - 1)]
    out = np.zeros((len(tokens), len(tokens)), bool)
    for q, (seg_q, iq) in enumerate(tokens):
        for k, (seg_k, ik) in enumerate(tokens):
            lq = iq if seg_q == "p" else prompt_len + iq
            lk = ik if seg_k == "p" else prompt_len + ik
            if seg_k != "p" and seg_k != seg_q:
                continue
            both_prompt = seg_q == "p" and seg_k == "p"
            ok = lk <= lq or (both_prompt and blocks[iq] >= 0 and blocks[iq] == blocks[ik])
            if window is not None and lq - lk >= window:
                ok = False
            out[q, k] = ok
    return out


@pytest.mark.parametrize("blocks", [[-1] * 5, [0] * 5, [-1, 0, 0, -1, -1]], ids=["causal", "prefix", "image"])
@pytest.mark.parametrize("window", [None, 3])
def test_block_option_mask_matches_the_definition(blocks, window):
    option_lens = [1, 3, 2, 4]
    seq = pack(_prompt(5, blocks), [[1] * n for n in option_lens])
    got = allowed(collate([seq], pad_id=0), window=window)[0]
    np.testing.assert_array_equal(got, _reference_allowed(5, option_lens, blocks, window))


def test_pack_positions_restart_after_the_prompt_and_targets_read_the_right_tokens():
    prompt = Prompt(ids=(1, 2, 3), positions=np.array([[0, 1, 2], [0, 5, 7]]), blocks=np.full(3, -1))
    seq = pack(prompt, [[7, 8, 9], [4]])
    assert seq.ids == [1, 2, 3, 7, 8]
    assert seq.segments == [0, 0, 0, 1, 1] and seq.logical == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(seq.positions, [[0, 1, 2, 3, 4], [0, 5, 7, 8, 9]])
    assert seq.targets == [[(2, 7), (3, 8), (4, 9)], [(2, 4)]]


def test_collate_pads_right_and_padding_attends_only_to_itself():
    short, long = pack(_prompt(2), [[5]]), pack(_prompt(4), [[5, 6]])
    batch = collate([short, long], pad_id=-7)
    assert batch.ids.shape == (2, 5) and list(batch.ids[0, 2:]) == [-7, -7, -7]
    ok = allowed(batch)
    assert not ok[1, :, :][:, ~batch.valid[1]].any() and not ok[0][:2, 2:].any()
    for q in (2, 3, 4):  # padding queries of row 0 see themselves only
        assert ok[0, q].tolist() == [k == q for k in range(5)]


def test_continuation_queries_see_the_cached_prompt_and_their_own_tokens():
    batch = collate([pack(_prompt(3), [[5, 6, 7]])], pad_id=0)
    ok = allowed(batch, query_start=3)
    assert ok.shape == (1, 2, 5)
    assert ok[0].tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_masks_are_built_on_the_requested_device():
    """Only the (B, S) index arrays leave the host: on the meta device (no data) every step must run there."""
    import torch

    batch = collate([pack(_prompt(2), [[5]]), pack(_prompt(4), [[5, 6], [7]])], pad_id=0)  # row 0 padded
    ok = allowed(batch, query_start=1, window=2, device="meta")
    mask = layout.additive_mask(ok, torch.bfloat16)
    assert ok.device.type == mask.device.type == "meta"
    assert tuple(mask.shape) == (2, 1, 4, 5) and mask.dtype == torch.bfloat16
    cpu = layout.additive_mask(allowed(batch, query_start=1, window=2), torch.bfloat16)
    assert tuple(cpu.shape) == tuple(mask.shape) and cpu.dtype == mask.dtype


def test_a_prompt_that_does_not_fit_its_positions_is_refused():
    with pytest.raises(ValueError, match="do not fit"):
        Prompt(ids=(1, 2), positions=np.arange(3)[None], blocks=np.full(2, -1))
    with pytest.raises(ValueError, match="at least one token"):
        pack(_prompt(2), [[]])


def test_byte_lru_evicts_the_least_recently_used_and_skips_oversized_entries():
    store = ByteLRU(max_bytes=10)
    store.put("a", 1, nbytes=4)
    store.put("b", 2, nbytes=4)
    assert store.get("a") == 1  # a is now the most recent
    store.put("c", 3, nbytes=4)
    assert "b" not in store and "a" in store and "c" in store and store.nbytes == 8 and store.evictions == 1
    store.put("huge", 4, nbytes=11)
    assert "huge" not in store and store.nbytes == 8
    assert store.touch("a") == 4 and store.touch("b") is None  # touch: a is the most recent again
    store.put("d", 5, nbytes=4)
    assert "c" not in store and "a" in store and "d" in store
    with pytest.raises(ValueError):
        ByteLRU(-1)


def test_segmented_lru_keeps_entries_asked_for_twice_through_a_scan_of_new_ones():
    store = SegmentedLRU(max_bytes=40, protected_share=0.5)
    for key in "ab":
        store.put(key, key.upper(), nbytes=10)
        assert store.get(key) == key.upper()  # asked for again: protected (20 of its 20 bytes)
    for i in range(50):  # a scan of new entries cycles through probation's 20 bytes
        store.put(i, i, nbytes=10)
    assert "a" in store and "b" in store and 48 in store and 49 in store and len(store) == 4
    assert store.nbytes == 40 and store.protected_bytes == 20 and store.evictions == 48
    assert store.get(48) == 48  # promoted: protected is over its share, so its least recent (a) falls back
    assert store.protected_bytes == 20 and store.touch("a") == 10
    store.put("c", "C", nbytes=10)  # probation (49, a, c) is over: its least recent, 49, goes
    assert 49 not in store and all(k in store for k in ("a", "b", "c", 48)) and store.evictions == 49
    store.put("huge", 0, nbytes=41)
    assert "huge" not in store and store.nbytes <= 40
    store.put("b", "B2", nbytes=10)  # replacing a protected entry keeps the byte counts right
    assert store.get("b") == "B2" and store.nbytes == 10 * len(store) == 40 and store.protected_bytes == 20
    with pytest.raises(ValueError):
        SegmentedLRU(10, protected_share=1.5)


def test_image_digest_keys_pixels_size_and_mode():
    red = Image.new("RGB", (4, 4), (255, 0, 0))
    assert image_digest(red) == image_digest(Image.new("RGB", (4, 4), (255, 0, 0)))
    assert image_digest(red) != image_digest(Image.new("RGB", (4, 4), (254, 0, 0)))
    assert image_digest(red) != image_digest(Image.new("RGB", (2, 8), (255, 0, 0)))
    assert image_digest(red) != image_digest(red.convert("RGBA"))
    assert image_digest(red) == image_digest(red)  # memoised per object, same answer


@pytest.mark.parametrize("module", [layout, cache, prefixes])
def test_docstring_examples_run(module):
    assert doctest.testmod(module, raise_on_error=True).attempted > 0


def test_vision_chunks_bound_groups_and_pixel_values():
    """Consecutive chunks of at most max_groups groups and max_values float values; masks do not count, and
    a group over the bound is a chunk alone."""
    import torch

    from laya_robustness.scoring.hf import vision_chunks

    def group(name, tiles):
        return (name, {"pixel_values": torch.zeros(1, tiles, 3, 4, 4), "mask": torch.ones(1, tiles, 4, 4, dtype=torch.bool)})

    groups = [group("a", 1), group("b", 1), group("c", 5), group("d", 1), group("e", 1), group("f", 1)]
    names = [[name for name, _ in chunk] for chunk in vision_chunks(groups, max_groups=2, max_values=3 * 48)]
    assert names == [["a", "b"], ["c"], ["d", "e"], ["f"]]
    assert [[n for n, _ in c] for c in vision_chunks(groups, 16, 1 << 30)] == [["a", "b", "c", "d", "e", "f"]]


@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("blocks", [[-1] * 6, [0, 0, -1, -1, -1, -1]], ids=["causal", "image-block"])
def test_rows_after_their_prefixes_keep_the_mask_of_their_whole_sequence(blocks, window):
    """Sequences whose first 1, 3 and 2 tokens come as a cache: their own tokens start after the longest prefix,
    and who may attend to whom among each row's tokens is what the row alone would allow."""
    seqs = [pack(_prompt(n, blocks[:n]), [[100 + 10 * j + t for t in range(m)] for j, m in enumerate(option_lens)])
            for n, option_lens in ((4, [2, 3]), (6, [1, 2, 2]), (5, [3]))]
    lengths = [1, 3, 2]
    aligned = collate(seqs, pad_id=0, prefix_lengths=lengths)
    start = max(lengths)
    ok = allowed(aligned, query_start=start, window=window)
    for i, (seq, n) in enumerate(zip(seqs, lengths)):
        alone = allowed(collate([seq], pad_id=0), window=window)[0].numpy()
        columns = np.concatenate([np.arange(n), start + np.arange(len(seq) - n)])
        assert aligned.valid[i].sum() == len(seq) and list(aligned.ids[i, columns]) == seq.ids
        np.testing.assert_array_equal(aligned.positions[:, i, columns], seq.positions)
        np.testing.assert_array_equal(ok[i][: len(seq) - n][:, columns].numpy(), alone[n:])
        assert not ok[i][: len(seq) - n][:, ~aligned.valid[i]].any()  # the gap and the padding are never seen
        # each target is read where the row alone reads it: the same input token, among the queries
        for option, moved in zip(seq.targets, after_prefix(seq.targets, n)):
            assert [(aligned.ids[i, start + s], t) for s, t in moved] == [(seq.ids[s], t) for s, t in option]


def test_collate_refuses_a_prefix_that_leaves_no_token_to_run():
    with pytest.raises(ValueError, match="do not fit"):
        collate([pack(_prompt(3), [[1]])], pad_id=0, prefix_lengths=[3])


@pytest.mark.parametrize("ids, blocks, expected", [
    ([1, 9, 9, 2, 3], [-1] * 5, 3),                  # through the last image token
    ([9, 2, 9, 9, 3], [-1] * 5, 4),                  # two images: through the second
    ([1, 2, 3], [-1] * 3, 0),                        # no image
    ([1, 9, 9], [-1] * 3, 0),                        # nothing after the image to run
    ([1, 9, 9, 2], [-1, 0, 0, -1], 3),               # a Gemma 3 image block ends with the prefix
    ([9, 9, 2, 3], [0, 0, 0, 0], 0),                 # a prefix-LM: one block over the whole prompt
    ([9, 9, 2, 3], [0, 0, 0, -1], 0),                # a block that runs past the last image token
], ids=["causal", "two-images", "no-image", "image-last", "image-block", "prefix-lm", "straddling"])
def test_the_shared_prefix_ends_after_the_last_image_token_unless_a_block_straddles_it(ids, blocks, expected):
    assert shared_length(ids, np.asarray(blocks), image_token_id=9) == expected


@pytest.mark.parametrize("kind", [ByteLRU, SegmentedLRU])
def test_forget_by_image_drops_what_a_scan_of_every_key_would_and_nothing_else(kind):
    """Seeded puts, gets and forgets past the byte bound (so entries are evicted and, segmented, promoted and
    demoted): after each forget the store holds what a scan of every key for the forgotten images leaves, and its
    index names exactly the keys held."""
    rng = np.random.default_rng(7)
    digests = [f"d{i}" for i in range(12)]
    store = kind(max_bytes=40, digests_of=lambda key: set(key))
    forgets = 0
    for _ in range(2000):
        op = rng.integers(0, 10)
        key = tuple(sorted(set(rng.choice(digests, size=rng.integers(1, 4)))))
        if op < 6:
            store.put(key, key, nbytes=int(rng.integers(1, 9)))
        elif op < 9:
            store.get(key)
        else:
            gone = set(rng.choice(digests, size=2))
            expected = [k for k in store.keys() if not gone & set(k)]
            store.forget(gone)
            assert sorted(store.keys()) == sorted(expected)
            forgets += 1
        indexed = {k for keys in store._by_digest.values() for k in keys}
        assert indexed == set(store.keys())
        assert store.nbytes <= store.max_bytes
    assert forgets > 100 and store.evictions > 100


def test_forget_needs_a_store_that_knows_its_keys_images():
    with pytest.raises(TypeError, match="digests_of"):
        ByteLRU(max_bytes=10).forget(["d"])
