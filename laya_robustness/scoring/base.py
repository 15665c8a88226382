"""The scorer contract (what the harness calls), its errors, what a scorer can do, and the display-order ->
label-order map.

A scorer must have what ``Scorer`` declares; the HF scorer also has the optional capabilities
listed in ``OPTIONAL_CAPABILITIES``, which the harness uses when present. ``capabilities(scorer)`` probes a scorer
once for all of them (any object: a plug-in declares nothing) into a ``ScorerCapabilities`` the run reads.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

from laya_robustness.rows import Row


class ModelLoadError(RuntimeError):
    """The model, its processor or a plug-in scorer could not be loaded (a harness error, not a gate failure)."""


class UnsupportedArchitecture(ModelLoadError):
    """The checkpoint's architecture has no adapter; the message names it and lists the supported ones."""


class ScorerContractError(ModelLoadError):
    """A plug-in factory returned an object that does not have what ``Scorer`` declares."""


class ScoringError(RuntimeError):
    """Scoring a batch failed; the message names the model and the row ids of the batch (a harness error)."""

    def __init__(self, model: str, row_ids: Sequence[str], cause: BaseException):
        self.model, self.row_ids = model, list(row_ids)
        shown = ", ".join(self.row_ids[:8]) + (f", ... ({len(self.row_ids)} rows)" if len(self.row_ids) > 8 else "")
        super().__init__(f"scoring with model {model!r} failed on rows [{shown}]: {type(cause).__name__}: {cause}")


_T = TypeVar("_T")


def guarded(model: str, rows: Sequence[Row], work: Callable[[], _T]) -> _T:
    """``work()``, any error but a ``ScoringError`` raised as one naming ``model`` and the rows' ids."""
    try:
        return work()
    except ScoringError:
        raise
    except Exception as exc:
        raise ScoringError(model, [r.row_id for r in rows], exc) from exc


@runtime_checkable
class Scorer(Protocol):
    """Anything that scores rows: one array of logits per row, one logit per option, in label order.

    ``identity`` is copied into the reports' meta (model name, weight hashes, template, ...).
    ``score_batch`` is the batch path (many rows per forward; bf16 autocast on CUDA allowed);
    ``score_predict`` the predict path (fp32; the harness passes one image's questions per call),
    with the prefix cache on or off.
    """

    identity: dict

    def score_batch(self, rows: Sequence[Row]) -> list[np.ndarray]:
        """The batch path: logits (label order) of every row."""

    def score_predict(self, rows: Sequence[Row], use_cache: bool = True) -> list[np.ndarray]:
        """The predict path: fp32 logits (label order) of the given rows, with or without the prefix cache."""


@dataclass(frozen=True)
class Answer:
    """A row answered in text: the generated ``text``, the option it names (label order; None when it names no
    option or several), the extraction rule that decided (``scoring.extraction``), and the option logits (label
    order) where the scorer has probabilities (a server's ``top_logprobs``), else None."""

    text: str
    choice: int | None
    extraction: str
    logits: np.ndarray | None = None


@runtime_checkable
class AnsweringScorer(Protocol):
    """A scorer that answers rows in text over requests (a model behind a server): the harness asks it for
    ``answers`` instead of logits, ``concurrency`` rows at a time, and reads ``probabilities`` (whether its
    answers carry option logits) once per run."""

    identity: dict
    concurrency: int
    probabilities: bool

    def answers(self, rows: Sequence[Row]) -> list[Answer]:
        """One answer per row, in order (the rows' requests in flight together)."""

    def generate(self, rows: Sequence[Row], max_new_tokens: int = 16) -> list[str]:
        """The generated text of each row (open-answer rows)."""


def answers_in_text(scorer: object) -> bool:
    """Whether the scorer answers in text over requests (``AnsweringScorer``) rather than scoring logits."""
    return callable(getattr(scorer, "answers", None)) and isinstance(getattr(scorer, "concurrency", None), int)


#: Optional methods and attributes the harness uses when a scorer has them (the HF scorer has all):
#: ``stats`` (dict of counters: ``rows``, ``forwards``, ``vision_encodes``, ...), ``generate(rows,
#: max_new_tokens=16) -> list[str]`` (greedy answer text after the same prompt), ``layer_states(rows)
#: -> list[np.ndarray]`` ((n_layers + 1, hidden) fp32 at the last prompt position: the hook for
#: layerwise divergence analyses), ``score_batch_per_option(rows)`` (the batch path with every
#: option in its own sequence: the reference of the ``one_pass_vs_per_option`` invariance condition)
#: and ``shares_prefixes`` with ``score_batch_unshared(rows)`` (whether rows about one image share their
#: prompt prefix, and the batch path with every row over its whole prompt: the reference of
#: ``shared_prefix_vs_alone``).
OPTIONAL_CAPABILITIES = ("stats", "generate", "layer_states", "score_batch_per_option", "shares_prefixes",
                         "score_batch_unshared")


@dataclass(frozen=True)
class ScorerCapabilities:
    """What a scorer can do, probed once (``capabilities``): the run reads this record instead of the scorer.

    ``answers_in_text`` (an ``AnsweringScorer``: ``answers(rows)`` and ``concurrency`` rows in flight),
    ``probabilities`` (its rows carry option logits: any logit scorer, a served model only where its server
    returns them), ``generates`` (``generate(rows, max_new_tokens)``), ``per_option`` (``score_batch_per_option``),
    ``unshared`` (``score_batch_unshared``), ``shares_prefixes`` and ``prefix_sharing`` (the identity's account of
    it, None where it gives none), ``casts_weights`` (a torch ``model`` and a ``precision`` to swap: bf16 weights),
    ``replaceable`` (``replaced(model=..., precision=...)``: a copy with its own caches), ``layer_states``,
    ``forget_images``, ``stats`` (a dict of counters) and ``batch_precision`` (``fp32`` or ``bf16``: what the batch
    path runs in; ``fp32`` where the scorer does not say).
    """

    answers_in_text: bool = False
    concurrency: int | None = None
    probabilities: bool = True
    generates: bool = False
    per_option: bool = False
    unshared: bool = False
    shares_prefixes: bool = False
    prefix_sharing: str | None = None
    casts_weights: bool = False
    replaceable: bool = False
    layer_states: bool = False
    forget_images: bool = False
    stats: bool = False
    batch_precision: str = "fp32"

    @classmethod
    def probe(cls, scorer: object) -> "ScorerCapabilities":
        """The capabilities of any object, read from what it has (nothing is called but ``batch_precision()``)."""
        def has(name: str) -> bool:
            return callable(getattr(scorer, name, None))

        text = answers_in_text(scorer)
        identity = getattr(scorer, "identity", None)
        sharing = identity.get("prefix_sharing") if isinstance(identity, dict) else None
        return cls(
            answers_in_text=text, concurrency=scorer.concurrency if text else None,
            probabilities=bool(getattr(scorer, "probabilities", False)) if text else True,
            generates=has("generate"), per_option=has("score_batch_per_option"), unshared=has("score_batch_unshared"),
            shares_prefixes=bool(getattr(scorer, "shares_prefixes", False)),
            prefix_sharing=None if sharing is None else str(sharing),
            casts_weights=hasattr(scorer, "model") and hasattr(scorer, "precision"), replaceable=has("replaced"),
            layer_states=has("layer_states"), forget_images=has("forget_images"),
            stats=isinstance(getattr(scorer, "stats", None), dict),
            batch_precision=scorer.batch_precision() if has("batch_precision") else "fp32")


#: Probed scorers by ``id``, each with a weak reference that drops its entry when the scorer goes.
_PROBED: dict[int, tuple[weakref.ref, ScorerCapabilities]] = {}


def capabilities(scorer: object) -> ScorerCapabilities:
    """The scorer's ``ScorerCapabilities``, probed on the first call and kept while the scorer lives (an object
    without weak references is probed on every call)."""
    key = id(scorer)
    found = _PROBED.get(key)
    if found is not None and found[0]() is scorer:
        return found[1]
    record = ScorerCapabilities.probe(scorer)
    try:
        ref = weakref.ref(scorer, lambda _, key=key: _PROBED.pop(key, None))
    except TypeError:
        return record
    _PROBED[key] = (ref, record)
    return record


def check_scorer(scorer: object, source: str) -> object:
    """``scorer`` itself when it meets the ``Scorer`` contract, else ``ScorerContractError`` saying what is wrong.

    ``source`` names where the object came from (e.g. the plug-in spec) in the message.
    """
    problems = []
    identity = getattr(scorer, "identity", None)
    if not isinstance(identity, dict):
        problems.append(f"'identity' must be a dict, got {type(identity).__name__}")
    for name in ("score_batch", "score_predict"):
        method = getattr(scorer, name, None)
        if method is None:
            problems.append(f"method '{name}(rows)' is missing")
        elif not callable(method):
            problems.append(f"'{name}' is not callable")
    predict = getattr(scorer, "score_predict", None)
    if callable(predict):
        try:
            params = inspect.signature(predict).parameters
        except (TypeError, ValueError):
            params = {}
        takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        if params and "use_cache" not in params and not takes_kwargs:
            problems.append("'score_predict' must accept the keyword argument 'use_cache'")
    if problems:
        raise ScorerContractError(f"scorer from {source} ({type(scorer).__name__}) does not meet the Scorer "
                                  f"contract: {'; '.join(problems)}")
    return scorer


def to_label_order(row: Row, shown_logits: Sequence[float]) -> np.ndarray:
    """Map logits given in display order back to label order."""
    shown = np.asarray(shown_logits, dtype=np.float64)
    if row.display_order is None:
        return shown
    out = np.empty_like(shown)
    out[list(row.display_order)] = shown
    return out


def label_choice(row: Row, shown_index: int | None) -> int | None:
    """An option's index in display order mapped to label order (None stays None: no option named)."""
    if shown_index is None or row.display_order is None:
        return shown_index
    return row.display_order[shown_index]


def batch_precision(precision: str, device: str) -> str:
    """``bf16`` when the batch path runs under bf16 autocast (``bf16``, or ``auto`` on CUDA), else ``fp32``."""
    return "bf16" if precision == "bf16" or (precision == "auto" and str(device).startswith("cuda")) else "fp32"
