"""The Hugging Face scorer's paths over rows: the batch path's buckets (one pass, per option, with or without shared
prefixes), the predict path against each row's prompt cache, layer states and greedy generation.

- **batch**: all k options of a row in one sequence with block option attention (``scoring.layout``), a window's
  buckets one forward each (``hf_planning``); rows with a shareable prefix run after its keys and values
  (``hf_prefix_runs``), the others over their whole prompt. **Per option**: one sequence per (row, option).
- **predict**: fp32; each row's prompt runs once, then its multi-token options run as one batch against the
  repeated prompt cache (``use_cache=True``), or every option runs as its own prompt + option sequence.
- ``stats``: ``rows`` scored and ``tokens_alone``, the tokens a scorer running each row's whole prompt and options
  would compute.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from laya_robustness.rows import Row
from laya_robustness.scoring import layout, prefixes
from laya_robustness.scoring.base import to_label_order
from laya_robustness.scoring.hf_forward import Forward
from laya_robustness.scoring.hf_images import ImageInputs, PreparedRow
from laya_robustness.scoring.hf_planning import Planner, window_prefixes
from laya_robustness.scoring.hf_prefix_runs import PrefixRuns


class Paths:
    """Rows through the language model on each path. ``shares_prefixes``: rows with a shareable prefix run it once
    (see ``HFVLMScorer.shares_prefixes``); ``guard(rows, work)`` runs work naming the rows when it fails."""

    def __init__(self, images: ImageInputs, planner: Planner, forward: Forward, prefix_runs: PrefixRuns,
                 shares_prefixes: bool, guard: Callable):
        self.images, self.planner, self.forward, self.prefix_runs = images, planner, forward, prefix_runs
        self.shares_prefixes, self.guard = shares_prefixes, guard
        self.precision, self.stats, self.pad_id = forward.precision, forward.stats, forward.pad_id

    # -- batch path -----------------------------------------------------------------------------

    def score_rows(self, rows: Sequence[Row], one_pass: bool, share: bool) -> list[np.ndarray]:
        """Logits (label order) of every row on the batch path: ``one_pass`` all options of a row in one sequence
        (else one per option), ``share`` each shareable prefix run once (where the scorer shares prefixes)."""
        shown: list = [None] * len(rows)
        share = share and one_pass and self.shares_prefixes
        for buckets, held in self.planner.window_buckets(rows, "batch", share):
            plan = window_prefixes(buckets, self.planner.batch_size) if share else None
            for j, (indices, chunk_rows, chunk_prepared) in enumerate(buckets):

                def work(j=j, chunk_rows=chunk_rows, chunk_prepared=chunk_prepared):
                    if one_pass:
                        return self._one_pass(chunk_rows, chunk_prepared, held, plan and (plan, j, buckets))
                    return self._per_option(chunk_rows, chunk_prepared, held)

                for i, scores in zip(indices, self.guard(chunk_rows, work)):
                    shown[i] = scores
                self.stats["tokens_alone"] += sum(p.alone_tokens for p in chunk_prepared)
                if plan:
                    plan.done(j)
        self.stats["rows"] += len(rows)
        return [to_label_order(r, s) for r, s in zip(rows, shown)]

    def _per_option(self, rows: Sequence[Row], prepared: Sequence[PreparedRow], held: dict) -> list[list[float]]:
        """One sequence per (row, option) over the whole prompt, all in one forward."""
        features = self.images.row_features(prepared, rows, "batch", held)
        items = [(p, (j,)) for p in prepared for j in range(len(p.options))]
        flat = self.forward.score_sequences(items, features, "batch")
        out, k = [], 0
        for p in prepared:
            out.append([s[0] for s in flat[k:k + len(p.options)]])
            k += len(p.options)
        return out

    def _one_pass(self, rows: Sequence[Row], prepared: Sequence[PreparedRow], held: dict,
                  planned=None) -> list[list[float]]:
        """All options of each row in one sequence: rows with a shareable prefix against its keys and values
        (with ``planned``, the window's prefix plan, this bucket's index and the window's buckets), the others
        over their whole prompt."""
        out: list = [None] * len(rows)
        shared = [i for i, p in enumerate(prepared) if planned and p.prefix]
        whole = sorted(set(range(len(rows))) - set(shared))
        if whole:
            items = [(prepared[i], tuple(range(len(prepared[i].options)))) for i in whole]
            features = self.images.row_features([p for p, _ in items], [rows[i] for i in whole], "batch", held)
            for i, scores in zip(whole, self.forward.score_sequences(items, features, "batch")):
                out[i] = scores
        if shared:
            items = [(prepared[i], tuple(range(len(prepared[i].options)))) for i in shared]
            kvs = self.prefix_runs.planned_kvs([p for p, _ in items], held, *planned)
            for i, scores in zip(shared, self.prefix_runs.score_after(items, kvs, "batch")):
                out[i] = scores
        return out

    # -- predict path ---------------------------------------------------------------------------

    def predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """fp32 logits (label order) of the given rows (one image's questions) in one call."""
        out, held = [], {}
        for row in rows:
            out.append(self.guard([row], lambda row=row: to_label_order(row, self._predict_one(row, use_cache,
                                                                                               held))))
        self.stats["rows"] += len(rows)
        return out

    def _predict_one(self, row: Row, use_cache: bool, held: dict | None = None) -> list[float]:
        import torch

        prepared = self.images.prepare(row)
        self.stats["tokens_alone"] += prepared.alone_tokens
        if not use_cache:
            features = self.images.row_features([prepared], [row], "predict", held)
            return [s[0] for s in self.forward.score_sequences(
                [(prepared, (j,)) for j in range(len(prepared.options))], features, "predict")]
        n = len(prepared.prompt.ids)
        with self.precision.no_grad():
            last_hidden, cache = self._prompt_cache(prepared, row, held)
            last = torch.log_softmax(self.forward.adapter.head(last_hidden).float(), dim=-1)[0]
            scores = [float(last[o[0]]) for o in prepared.options]
            longer = [j for j, o in enumerate(prepared.options) if len(o) > 1]
            if longer:
                seqs = [layout.pack(prepared.prompt, [list(prepared.options[j])]) for j in longer]
                batch = layout.collate(seqs, self.pad_id)
                cache.batch_repeat_interleave(len(longer))
                cont = self.forward.run(batch, self.forward.embed_ids(batch.ids[:, n:]), query_start=n,
                                        cache=cache).last_hidden_state
                rest = self.forward.log_likelihoods(cont, [[[(s - n, t) for s, t in seq.targets[0][1:]]]
                                                           for seq in seqs])
                for j, (extra,) in zip(longer, rest):
                    scores[j] += extra
        return scores

    def _prompt_cache(self, prepared: PreparedRow, row: Row, held: dict | None):
        """The last prompt token's hidden state (1, hidden) and the prompt's ``DynamicCache``: the tokens after a
        shareable prefix run against its keys and values, any other prompt runs whole."""
        from transformers import DynamicCache

        batch = layout.collate([layout.pack(prepared.prompt, [])], self.pad_id)
        if self.shares_prefixes and prepared.prefix:
            kv, = self.prefix_runs.kvs([prepared], [row], "predict", held)
            cache, start = prefixes.batch_cache([kv]), kv.length
            embeds = self.forward.embed_ids(batch.ids[:, start:])
        else:
            features = self.images.row_features([prepared], [row], "predict", held)
            cache, start = DynamicCache(), 0
            embeds = self.forward.embed(batch, [prepared], features)
        hidden = self.forward.run(batch, embeds, query_start=start, cache=cache).last_hidden_state
        n = len(prepared.prompt.ids)
        return hidden[0, n - 1 - start:n - start], cache

    # -- hidden states and generation -----------------------------------------------------------

    def layer_states(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """Per row, fp32 hidden states (n_layers + 1, hidden) at the last prompt position (see
        ``HFVLMScorer.layer_states``)."""
        import torch

        out: list = [None] * len(rows)
        for indices, chunk_rows, chunk_prepared, held in self.planner.forward_chunks(rows, "predict"):

            def work(chunk_rows=chunk_rows, chunk_prepared=chunk_prepared, held=held):
                features = self.images.row_features(chunk_prepared, chunk_rows, "predict", held)
                batch = layout.collate([layout.pack(p.prompt, []) for p in chunk_prepared], self.pad_id)
                with self.precision.no_grad(), self.forward.whole_prompts():
                    result = self.forward.run(batch, self.forward.embed(batch, chunk_prepared, features),
                                              output_hidden_states=True)
                states = torch.stack(result.hidden_states, dim=1)  # (B, n_layers + 1, S, hidden)
                return [states[b, :, len(p.prompt.ids) - 1].float().cpu().numpy()
                        for b, p in enumerate(chunk_prepared)]

            for i, state in zip(indices, self.guard(chunk_rows, work)):
                out[i] = state
        return out

    def generate(self, rows: Sequence[Row], stop: set, max_new_tokens: int = 16) -> list[str]:
        """Greedy answer text after each row's prompt (fp32, deterministic), up to a ``stop`` token (left out)."""
        with self.forward.whole_prompts():
            return [self.guard([r], lambda r=r: self._generate_one(r, stop, max_new_tokens)) for r in rows]

    def _generate_one(self, row: Row, stop: set, max_new_tokens: int) -> str:
        from transformers import DynamicCache

        prepared = self.images.prepare(row)
        features = self.images.row_features([prepared], [row], "predict")
        prompt, tokens = prepared.prompt, []
        with self.precision.no_grad():
            batch = layout.collate([layout.pack(prompt, [])], self.pad_id)
            cache = DynamicCache()
            hidden = self.forward.run(batch, self.forward.embed(batch, [prepared], features),
                                      cache=cache).last_hidden_state[0, -1:]
            for _ in range(max_new_tokens):
                token = int(self.forward.adapter.head(hidden).float().argmax(-1)[0])
                if token in stop:
                    break
                tokens.append(token)
                seq = layout.pack(prompt, [tokens + [0]])  # fed: prompt | tokens (the last entry is never fed)
                batch = layout.collate([seq], self.pad_id)
                start = len(prompt.ids) + len(tokens) - 1
                hidden = self.forward.run(batch, self.forward.embed_ids([[token]]), query_start=start,
                                          cache=cache).last_hidden_state[0, -1:]
        return self.forward.adapter.tokenizer.decode(tokens, skip_special_tokens=True)
