"""The Hugging Face scorer's shared prompt prefixes: each distinct prefix run once, in a forward over prefixes alone,
its keys and values kept in a store bounded by bytes, and rows run only their own tokens against them.

A row's prompt through its last image token (``scoring.prefixes``) runs once per content and precision mode; its
keys and values are kept (a segmented LRU bounded by bytes, ``cache.DEFAULT_PREFIX_CACHE_BYTES``) and every row
that shares it, in this call or a later one, runs only its own tokens against them. On the batch path a window's
plan (``prefixes.WindowPrefixes``) runs the prefixes its buckets lack ahead, as many a forward as a bucket of its
longest rows has tokens. ``stats`` counts the prefixes run (``prefixes``) and the rows that found theirs computed
before (``prefix_hits``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from laya_robustness.rows import Row
from laya_robustness.scoring import layout, prefixes
from laya_robustness.scoring.cache import SegmentedLRU
from laya_robustness.scoring.hf_forward import Forward
from laya_robustness.scoring.hf_images import ImageInputs, PreparedRow


class PrefixRuns:
    """The prefix store (keyed ``(mode, prefix key)``) and the forwards over prefixes and after them."""

    def __init__(self, images: ImageInputs, forward: Forward, store_bytes: int, guard: Callable):
        self.images, self.forward, self.guard = images, forward, guard
        self.precision, self.stats = forward.precision, forward.stats
        self.store = SegmentedLRU(store_bytes,  # -> prefixes.PrefixKV
                                  digests_of=lambda key: {d for group in key[1][0] for d in group})

    def stored(self, prepared: PreparedRow, mode: str) -> bool:
        """Whether the store holds the row's prefix (on a path that shares prefixes, the row then needs no image
        inputs)."""
        return bool(prepared.prefix) and (mode, prepared.prefix) in self.store

    def kvs(self, prepared: Sequence[PreparedRow], rows: Sequence[Row], path: str,
            held: dict | None) -> list[prefixes.PrefixKV]:
        """Each row's prefix keys and values: from the store, or run now, each distinct prefix once and all of
        them in one forward over the prefixes alone (then kept in the store)."""
        mode = self.precision.mode(path)
        found: dict = {}
        for p in prepared:
            kv = found.get(p.prefix) or self.store.get((mode, p.prefix))
            if kv is not None:
                found[p.prefix] = kv
                self.stats["prefix_hits"] += 1
        missing = {p.prefix: (p, row) for p, row in zip(prepared, rows) if p.prefix not in found}
        if missing:
            found.update(self.run(list(missing.values()), path, held))
        return [found[p.prefix] for p in prepared]

    def planned_kvs(self, prepared: Sequence[PreparedRow], held: dict, plan: prefixes.WindowPrefixes,
                    j: int, buckets) -> list[prefixes.PrefixKV]:
        """The prefix keys and values of bucket ``j``'s rows: held by the window's plan, or from the store; what
        the bucket lacks runs first, with what the buckets after it lack (``WindowPrefixes.to_run``)."""
        mode = self.precision.mode("batch")
        for p in prepared:  # held from here on: the prefixes run next must not evict them from the store first
            if p.prefix not in plan.held and (kv := self.store.get((mode, p.prefix))) is not None:
                plan.held[p.prefix] = kv
        wanted = plan.to_run(j, lambda key: (mode, key) in self.store)
        if wanted:
            owners: dict = {}
            for _, chunk_rows, chunk in buckets[j:]:
                for p, r in zip(chunk, chunk_rows):
                    owners.setdefault(p.prefix, (p, r))
            run = [owners[key] for key in wanted]  # an error names the rows whose prefixes ran, later buckets' too
            plan.held.update(self.guard([r for _, r in run], lambda: self.run(run, "batch", held)))
        for p in prepared:
            self.stats["prefix_hits"] += plan.is_hit(p.prefix, j)
        return [plan.held[p.prefix] for p in prepared]

    def run(self, owners: Sequence[tuple[PreparedRow, Row]], path: str, held: dict | None) -> dict:
        """Distinct prefixes (each with a row that has it) run in one forward over the prefixes alone, each kept in
        the store: prefix key -> ``PrefixKV``."""
        from transformers import DynamicCache

        mode = self.precision.mode(path)
        new = [p for p, _ in owners]
        heads = [replace(p, prompt=layout.Prompt(
            p.prompt.ids[:p.prefix_length], p.prompt.positions[:, :p.prefix_length],
            p.prompt.blocks[:p.prefix_length])) for p in new]
        features = self.images.row_features(new, [row for _, row in owners], path, held)
        batch = layout.collate([layout.pack(h.prompt, []) for h in heads], self.forward.pad_id)
        cache = DynamicCache()
        with self.precision.no_grad(), self.precision.autocast(path):
            self.forward.run(batch, self.forward.embed(batch, heads, features), cache=cache)
        out = {}
        for b, p in enumerate(new):
            out[p.prefix] = kv = prefixes.PrefixKV.from_cache(cache, b, p.prefix_length)
            self.store.put((mode, p.prefix), kv, kv.nbytes)
        self.stats["prefixes"] += len(new)
        return out

    def score_after(self, items: Sequence[tuple[PreparedRow, tuple[int, ...]]],
                    kvs: Sequence[prefixes.PrefixKV], path: str) -> list[list[float]]:
        """One forward over the tokens after each row's prefix (``prompt[prefix:] | options[j][:-1] for j in
        item``) against the prefixes' keys and values: log-likelihood per option."""
        seqs = [layout.pack(p.prompt, [list(p.options[j]) for j in js]) for p, js in items]
        lengths = [p.prefix_length for p, _ in items]
        batch = layout.collate(seqs, self.forward.pad_id, prefix_lengths=lengths)
        start = max(lengths)
        if bool((batch.ids[:, start:] == self.forward.adapter.image_token_id).any()):
            raise ValueError("an image token after a shared prefix: the prefix must end after the last image token")
        with self.precision.no_grad(), self.precision.autocast(path):
            hidden = self.forward.run(batch, self.forward.embed_ids(batch.ids[:, start:]), query_start=start,
                                      cache=prefixes.batch_cache(kvs)).last_hidden_state
            return self.forward.log_likelihoods(hidden, [layout.after_prefix(s.targets, n)
                                                         for s, n in zip(seqs, lengths)])
