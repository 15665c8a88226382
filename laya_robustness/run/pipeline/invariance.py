"""Repeat and batch invariance: the same rows scored under conditions that must not change their logits.

Each condition is compared with its own path's reference (the batch path with each row
alone, or predict with one question per call and the prefix cache); ``one_pass_vs_per_option``
holds the batch path's one pass over all options of a row to one sequence per option, and
``shared_prefix_vs_alone`` its shared prompt prefixes (an image's prefix run once for all the rows
about it) to each row alone over its whole prompt. For
every row it records |dp| (calibrated probabilities), |dlogit|, the argmax before and after
and the margin (top probability minus the runner-up) before and after.

A served model (``scoring.base.AnsweringScorer``) takes the conditions its server can run
(``ServedInvarianceRun``): each row alone, asked twice; rows sent together (in row order and reversed); each
row sent together with the hostile neighbours; a condition with a prompt known to be longer than the served
model's context (its numbers: ``scoring.served.context``) skips, asking nothing past it. Its answers are compared
by their option and their text (``bitwise``: the texts, and the logits where it has them, identical); without
probabilities |dp| and |dlogit| are not available. The other conditions need a predict path, a prefix-cache
switch, the weights or per-option scoring, which a server does not offer: they raise ``ConditionNotSupported``
saying so.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from laya_robustness.metrics.calibration import calibrated_probs
from laya_robustness.records import NO_PROBABILITIES, UNPARSED_ANSWER
from laya_robustness.rows import Row
from laya_robustness.run.pipeline.chunks import cluster_indices
from laya_robustness.scoring.base import Answer, capabilities

FP32, BF16 = "fp32", "bf16"
LONG_CONTEXT = " ".join(["This sentence only makes the prompt long."] * 24)
EXTRA_OPTIONS = ("purple", "orange", "black", "white", "pink", "brown", "grey", "violet")


class ConditionNotSupported(Exception):
    """The scorer cannot run this condition (e.g. a plug-in without a torch model for bf16 weights)."""


@dataclass(frozen=True)
class Condition:
    name: str
    path: str  # "batch" or "predict": which reference it is compared with
    description: str


CONDITIONS = (
    Condition("repeat_batch", "batch", "batch path, each row alone, scored twice"),
    Condition("repeat_predict", "predict", "predict, one question per call, scored twice"),
    Condition("batched", "batch", "batches of --batch-size rows in row order"),
    Condition("batched_reversed", "batch", "batches of --batch-size rows in reversed row order"),
    Condition("hostile", "batch", "each row batched with a long-text, two-image, text-only and eight-option row"),
    Condition("predict_all_questions", "predict", "predict, all of an image's questions in one call"),
    Condition("predict_all_questions_hostile", "predict", "the same plus a hostile eight-option question"),
    Condition("prefix_cache_one", "predict", "predict without the prefix cache, one question per call"),
    Condition("prefix_cache_all", "predict", "predict without the prefix cache, all questions per call"),
    Condition("bf16_weights", "batch", "bf16 weights vs fp32 weights on the batch path, both under bf16 autocast"),
    Condition("predict_vs_batch", "batch", "predict (fp32) vs the batch path, both alone"),
    Condition("one_pass_vs_per_option", "batch",
              "all options of a row in one sequence (block option attention) vs one sequence per option, "
              "each row alone"),
    Condition("shared_prefix_vs_alone", "batch",
              "the rows in one call with a neighbour about the same image each, every image's prompt prefix run "
              "once (or read from the prefix store), vs each row alone over its whole prompt"),
)
CONDITION_NAMES = tuple(c.name for c in CONDITIONS)
#: The thresholds section whose limits apply to any condition that ran in bf16 (a flip budget).
BF16_BUDGET = "bf16"
#: Every ``[invariance.<section>]`` a limits file may hold: the conditions and the bf16 flip budget.
INVARIANCE_CONDITIONS = (*CONDITION_NAMES, BF16_BUDGET)
#: A dual encoder's results are reported as "dual:<condition>" and held to that condition's limits.
DUAL_PREFIX = "dual:"
#: The conditions a dual encoder can take (one image per row; there is no prefix cache to vary).
DUAL_CONDITIONS = ("repeat_batch", "repeat_predict", "batched", "batched_reversed", "bf16_weights",
                   "predict_vs_batch")
#: Why a served model cannot take the other conditions (``ServedInvarianceRun``).
_NO_PREDICT = "a served model has no predict path (one chat request answers one question)"
SERVED_UNSUPPORTED = {
    "repeat_predict": _NO_PREDICT,
    "predict_all_questions": _NO_PREDICT,
    "predict_all_questions_hostile": _NO_PREDICT,
    "prefix_cache_one": "a request cannot switch the server's prefix (KV) cache off",
    "prefix_cache_all": "a request cannot switch the server's prefix (KV) cache off",
    "bf16_weights": "the weights behind a server are not the harness's to cast to bf16",
    "predict_vs_batch": "a served model has one path (a chat request): no predict and batch paths to compare",
    "one_pass_vs_per_option": "a served model is scored one way (its answer's top_logprobs, or each option's own "
                              "request): no one-pass and per-option paths to compare",
}
#: What stands in for the precision of a served model's conditions (the server's own is unknown).
SERVED = "served"


def limits_section(condition: str, precision: str) -> str:
    """The ``[invariance.<section>]`` a result is judged by: the bf16 flip budget for a bf16 condition, else
    the condition's own (a dual encoder's ``dual:<condition>`` by ``<condition>``'s)."""
    return BF16_BUDGET if precision == BF16 else condition.removeprefix(DUAL_PREFIX)


def hostile_rows(rows: Sequence[Row]) -> list[Row]:
    """Neighbours that change padding, image count and option count: built from the first rows given."""
    with_image = [r for r in rows if r.images]
    choice = [r for r in with_image if r.primitive == "choice"] or with_image
    base, other = with_image[0], with_image[-1]
    eight = choice[0]
    options = eight.options + tuple(o for o in EXTRA_OPTIONS if o not in eight.options)[: 8 - len(eight.options)]
    return [
        dataclasses.replace(base, row_id="hostile/long_text", context=LONG_CONTEXT, display_order=None),
        dataclasses.replace(base, row_id="hostile/two_images", images=base.images + other.images),
        dataclasses.replace(base, row_id="hostile/text_only", images=()),
        dataclasses.replace(eight, row_id="hostile/eight_options", options=options, display_order=None),
    ]


def prefix_neighbours(rows: Sequence[Row]) -> list[Row]:
    """For each row with images, another question about the same images (reworded, options reversed): rows that
    share its prompt prefix."""
    return [dataclasses.replace(r, row_id=f"{r.row_id}/prefix_neighbour", question=f"Look again. {r.question}",
                                display_order=tuple(reversed(r.display_order or range(len(r.options)))))
            for r in rows if r.images]


def _margin(probs: np.ndarray) -> float:
    top = np.sort(probs)[::-1]
    return float(top[0] - top[1]) if len(top) > 1 else float(top[0])


def compare(rows: Sequence[Row], reference: Sequence[np.ndarray], condition: Sequence[np.ndarray],
            temperatures) -> dict:
    """Stats of one condition: max |dp|, max |dlogit|, flips, bitwise, and the per-row deltas."""
    per_row, flips = [], []
    for row, ref, new in zip(rows, reference, condition, strict=True):
        p_ref = np.asarray(calibrated_probs(ref, row.primitive, temperatures))
        p_new = np.asarray(calibrated_probs(new, row.primitive, temperatures))
        entry = {"row_id": row.row_id, "dataset": row.dataset,
                 "abs_dp": float(np.abs(p_ref - p_new).max()), "abs_dlogit": float(np.abs(ref - new).max()),
                 "answer": [int(np.argmax(ref)), int(np.argmax(new))],
                 "margin": [_margin(p_ref), _margin(p_new)]}
        per_row.append(entry)
        if entry["answer"][0] != entry["answer"][1]:
            flips.append(entry)
    return {"rows": len(per_row), "max_abs_dp": max(e["abs_dp"] for e in per_row),
            "max_abs_dlogit": max(e["abs_dlogit"] for e in per_row), "flips": len(flips),
            "bitwise": all(np.array_equal(a, b) for a, b in zip(reference, condition)),
            "flipped": flips, "per_row": per_row}


def _choice(answer: Answer) -> int:
    return UNPARSED_ANSWER if answer.choice is None else answer.choice


def compare_answers(rows: Sequence[Row], reference: Sequence[Answer], condition: Sequence[Answer],
                    temperatures) -> dict:
    """Stats of one condition of a served model: with logits in every answer, those of :func:`compare`; flips
    compare the chosen options (unparsed is its own answer), ``bitwise`` the texts (and logits); without
    logits |dp|, |dlogit| and margins are None and ``probabilities`` says why."""
    same_texts = all(a.text == b.text for a, b in zip(reference, condition, strict=True))
    if all(a.logits is not None for a in (*reference, *condition)):
        stats = compare(rows, [a.logits for a in reference], [b.logits for b in condition], temperatures)
        return {**stats, "bitwise": stats["bitwise"] and same_texts, "compared": "answer texts and logits"}
    per_row = [{"row_id": row.row_id, "dataset": row.dataset, "abs_dp": None, "abs_dlogit": None,
                "answer": [_choice(a), _choice(b)], "margin": [None, None], "text": [a.text, b.text]}
               for row, a, b in zip(rows, reference, condition, strict=True)]
    flipped = [e for e in per_row if e["answer"][0] != e["answer"][1]]
    return {"rows": len(per_row), "max_abs_dp": None, "max_abs_dlogit": None, "flips": len(flipped),
            "bitwise": same_texts, "compared": "answer texts", "probabilities": NO_PROBABILITIES,
            "flipped": flipped, "per_row": per_row}


class InvarianceRun:
    """Scores one row set under every condition, computing each path's reference once."""

    def __init__(self, scorer, rows: Sequence[Row], batch_size: int, temperatures):
        if not rows:
            raise ValueError("invariance needs at least one row")
        self.scorer, self.rows = scorer, list(rows)
        self.capabilities = capabilities(scorer)
        self.batch_size, self.temperatures = batch_size, temperatures
        self.hostile = hostile_rows(self.rows)
        self._cache: dict[str, list[np.ndarray]] = {}

    def _once(self, key: str, make: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def one(self, row: Row):
        """One row scored alone on the batch path (the unit every batch condition is compared with)."""
        return self.scorer.score_batch([row])[0]

    def group(self, rows: Sequence[Row]) -> list:
        """Rows scored together on the batch path."""
        return self.scorer.score_batch(rows)

    def alone(self) -> list[np.ndarray]:
        return self._once("alone", lambda: [self.one(r) for r in self.rows])

    def predict_one(self, use_cache: bool = True) -> list[np.ndarray]:
        return self._once(f"predict_one_{use_cache}",
                          lambda: [self.scorer.score_predict([r], use_cache=use_cache)[0] for r in self.rows])

    def predict_all(self, use_cache: bool = True, extra: Sequence[Row] = ()) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(self.rows)
        for idx in cluster_indices(self.rows):
            scored = self.scorer.score_predict([self.rows[i] for i in idx] + list(extra), use_cache=use_cache)
            for i, logits in zip(idx, scored):
                out[i] = logits
        return out

    def batched(self, order: Sequence[int]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(self.rows)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            for i, logits in zip(idx, self.group([self.rows[i] for i in idx])):
                out[i] = logits
        return out

    def with_hostile(self) -> list[np.ndarray]:
        return [self.group([r, *self.hostile])[0] for r in self.rows]

    def per_option(self) -> list[np.ndarray]:
        """The batch path with one sequence per (row, option), each row alone."""
        if not self.capabilities.per_option:
            raise ConditionNotSupported(f"{type(self.scorer).__name__} has no score_batch_per_option")
        return self._once("per_option", lambda: [self.scorer.score_batch_per_option([r])[0] for r in self.rows])

    def shared_prefixes(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(each row alone over its whole prompt, the rows scored with their prefix neighbours in one call)."""
        able = self.capabilities
        if not able.unshared or not able.shares_prefixes:
            how = "no score_batch_unshared" if able.prefix_sharing is None else able.prefix_sharing
            raise ConditionNotSupported(f"{type(self.scorer).__name__} shares no prompt prefixes ({how})")
        alone = self._once("unshared", lambda: [self.scorer.score_batch_unshared([r])[0] for r in self.rows])
        return alone, self.scorer.score_batch(self.rows + prefix_neighbours(self.rows))[:len(self.rows)]

    def bf16_pair(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The batch path alone under bf16 autocast: fp32 weights, then bf16 weights.

        A scorer with ``replaced(model=..., precision=...)`` makes both copies itself (with their own
        caches); otherwise its ``model`` and ``precision`` attributes are swapped on shallow copies.
        """
        import torch

        if not self.capabilities.casts_weights:
            raise ConditionNotSupported(f"{type(self.scorer).__name__} has no torch model to cast to bf16")
        weights = copy.deepcopy(self.scorer.model).to(torch.bfloat16)
        if self.capabilities.replaceable:
            fp32 = self.scorer.replaced(precision=BF16)
            bf16 = self.scorer.replaced(model=weights, precision=BF16)
        else:
            fp32 = copy.copy(self.scorer)
            fp32.precision = BF16
            bf16 = copy.copy(fp32)
            bf16.model = weights
        return ([fp32.score_batch([r])[0] for r in self.rows], [bf16.score_batch([r])[0] for r in self.rows])

    def scores(self, name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(reference, condition) logits of the named condition."""
        n = len(self.rows)
        if name == "repeat_batch":
            return self.alone(), [self.one(r) for r in self.rows]
        if name == "repeat_predict":
            return self.predict_one(), [self.scorer.score_predict([r])[0] for r in self.rows]
        if name == "batched":
            return self.alone(), self.batched(list(range(n)))
        if name == "batched_reversed":
            return self.alone(), self.batched(list(reversed(range(n))))
        if name == "hostile":
            return self.alone(), self.with_hostile()
        if name == "predict_all_questions":
            return self.predict_one(), self.predict_all()
        if name == "predict_all_questions_hostile":
            return self.predict_one(), self.predict_all(extra=self.hostile[3:])
        if name == "prefix_cache_one":
            return self.predict_one(), self.predict_one(use_cache=False)
        if name == "prefix_cache_all":
            return self.predict_one(), self.predict_all(use_cache=False)
        if name == "bf16_weights":
            return self.bf16_pair()
        if name == "predict_vs_batch":
            return self.predict_one(), self.alone()
        if name == "one_pass_vs_per_option":
            return self.per_option(), self.alone()
        if name == "shared_prefix_vs_alone":
            return self.shared_prefixes()
        raise KeyError(f"unknown invariance condition {name!r} (known: {', '.join(CONDITION_NAMES)})")

    def precision(self, name: str) -> str:
        """fp32 or bf16: the precision the condition's scores were computed in."""
        if name == "bf16_weights":
            return BF16
        batch_bf16 = self.capabilities.batch_precision == BF16
        uses_batch = next(c for c in CONDITIONS if c.name == name).path == "batch" or name == "predict_vs_batch"
        return BF16 if uses_batch and batch_bf16 else FP32

    def compare(self, reference: Sequence, condition: Sequence) -> dict:
        return compare(self.rows, reference, condition, self.temperatures)

    def run(self, name: str) -> dict:
        reference, condition = self.scores(name)
        return {"condition": name, "precision": self.precision(name), **self.compare(reference, condition)}


class ServedInvarianceRun(InvarianceRun):
    """A served model's rows under the conditions its server can run (see the module doc): a row alone is one
    request, rows together are requests in flight together; their answers are compared (``compare_answers``)."""

    def one(self, row: Row) -> Answer:
        return self.scorer.answers([row])[0]

    def group(self, rows: Sequence[Row]) -> list[Answer]:
        return self.scorer.answers(rows)

    def scores(self, name: str) -> tuple[list, list]:
        """(reference, condition) answers; ConditionNotSupported for a condition a server cannot run."""
        from laya_robustness.scoring.served import exceeds_context

        if name in SERVED_UNSUPPORTED:
            raise ConditionNotSupported(SERVED_UNSUPPORTED[name])
        try:
            self._once("fit", lambda: self._fit(self.rows))
            if name == "hostile":
                self._once("hostile fits", lambda: self._fit(self.hostile))
            return super().scores(name)
        except Exception as exc:
            if exceeds_context(exc):  # the server's context is the model's to choose, not a fault of the harness
                raise ConditionNotSupported(f"a prompt of it is longer than the served model's context "
                                            f"({exc.detail[:400]})") from None
            raise

    def _fit(self, rows: Sequence[Row]) -> list:
        """[] once each of ``rows`` is not known to be longer than the served model's context (the scorer's
        ``check_context`` raises ``ContextExceeded`` for one that is), so none is asked past it."""
        check = getattr(self.scorer, "check_context", None)
        if check is not None:
            check(rows)
        return []

    def precision(self, name: str) -> str:
        return SERVED

    def compare(self, reference: Sequence, condition: Sequence) -> dict:
        return compare_answers(self.rows, reference, condition, self.temperatures)


def invariance_run(scorer, rows: Sequence[Row], batch_size: int, temperatures):
    """The invariance run of a scorer: ``ServedInvarianceRun`` for a served model, else ``InvarianceRun``."""
    kind = ServedInvarianceRun if capabilities(scorer).answers_in_text else InvarianceRun
    return kind(scorer, rows, batch_size, temperatures)
