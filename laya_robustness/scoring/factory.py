"""Which scorer a run uses: the Hugging Face scorer (``hf``: a checkpoint, or a model object in memory), a model
behind an OpenAI-compatible server (``openai``), a CLIP / SigLIP dual encoder probed on caption rows (``dual``) or
a plug-in factory (``module:function``, or the name of a ``laya_robustness.scorers`` entry point): every scorer of a
run is made here, by name from ``SCORERS``."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from laya_robustness.registry import BrokenEntry, Registry
from laya_robustness.scoring.base import ScorerContractError, check_scorer
from laya_robustness.scoring.cache import (
    DEFAULT_FEATURE_CACHE_BYTES,
    DEFAULT_PIXEL_CACHE_BYTES,
    DEFAULT_PREFIX_CACHE_BYTES,
)

#: The ``--scorer`` of a model behind an OpenAI-compatible chat endpoint (``scoring.served``).
SERVED_SCORER = "openai"
#: The scorer of a CLIP / SigLIP dual encoder (``scoring.dual``): the lgip families probe it on caption rows.
DUAL_SCORER = "dual"
#: The entry points of installed packages that add a scorer by name: each names a plug-in factory.
ENTRY_POINT_GROUP = "laya_robustness.scorers"


@dataclass(frozen=True)
class ScorerSettings:
    """What a run asks of its scorer's loading (``load_scorer``'s keywords, ``device`` decided)."""

    device: str
    precision: str
    batch_size: int
    attn_implementation: str
    trust_remote_code: bool
    caches: dict
    served: dict | None


def _hf(spec: str, model, s: ScorerSettings):
    from laya_robustness.scoring.hf import HFVLMScorer

    return HFVLMScorer.from_pretrained(model, device=s.device, precision=s.precision, batch_size=s.batch_size,
                                       attn_implementation=s.attn_implementation,
                                       trust_remote_code=s.trust_remote_code, **s.caches)


def _dual(spec: str, model, s: ScorerSettings):
    from laya_robustness.scoring.dual import DualEncoderScorer

    return DualEncoderScorer.from_pretrained(model, device=s.device, precision=s.precision, batch_size=s.batch_size,
                                             attn_implementation=s.attn_implementation)


def _served(spec: str, model, s: ScorerSettings):
    from laya_robustness.scoring.served import ServedScorer

    if not s.served or not s.served.get("endpoint"):
        raise ScorerContractError(f"scorer {spec!r} needs an endpoint (--endpoint)")
    settings = dict(s.served)
    return ServedScorer.connect(settings.pop("endpoint"), model, **settings)


def _plugin(name: str, factory):
    """A plug-in factory (an entry point's object) as the registry's loaders are called."""
    if not callable(factory):
        raise TypeError(f"{factory!r} is not callable")

    def load(spec: str, model, s: ScorerSettings):
        scorer = factory(model, device=s.device, precision=s.precision, batch_size=s.batch_size,
                         attn_implementation=s.attn_implementation)
        return check_scorer(scorer, f"plug-in {spec!r}")

    return load


#: Scorer name -> its loader ``(spec, model, ScorerSettings) -> scorer`` (``registry.Registry``): the built-in ones,
#: then the plug-in factories of the ``laya_robustness.scorers`` entry points of installed packages.
SCORERS = Registry("scorer", adapt=_plugin)
SCORERS.add("hf", _hf)
SCORERS.add(SERVED_SCORER, _served)
SCORERS.add(DUAL_SCORER, _dual)


def scorer_names() -> tuple[str, ...]:
    """The names ``--scorer`` takes besides ``module:function``: ``hf``, ``openai`` and those of the entry points."""
    SCORERS.load_entry_points(ENTRY_POINT_GROUP)
    return tuple(name for name in SCORERS.names() if name != DUAL_SCORER)


def load_scorer(spec: str, model, *, device: str | None = None, precision: str = "auto", batch_size: int = 16,
                attn_implementation: str = "eager", trust_remote_code: bool = False,
                feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES,
                prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, served: dict | None = None, processor=None):
    """``hf``: a Hugging Face image-text-to-text model; ``openai``: ``model`` (None: the endpoint's only model)
    behind the OpenAI-compatible endpoint of ``served`` (``ServedScorer.connect``'s keywords: ``endpoint``,
    ``api_key_env``, ``concurrency``, ``timeout_s``); ``dual``: a CLIP / SigLIP hub id or directory
    (``DualEncoderScorer``: precision, batch size and attention apply, the caches do not); the name of a
    ``laya_robustness.scorers`` entry point, or ``module:function``: a plug-in factory.

    With ``hf``, ``model`` is a hub id or a checkpoint directory, or a loaded model object scored as it stands
    (``HFVLMScorer.from_model``: ``processor`` is then required, ``device`` defaults to the model's own and the
    loading options do not apply). ``device`` is ``cpu`` when not given, a loaded model's own device aside.

    A plug-in factory is called as ``function(model, device=..., precision=..., batch_size=...,
    attn_implementation=...)`` and must return what ``laya_robustness.scoring.base.Scorer``
    declares (checked here: ``ScorerContractError`` otherwise). Loading failures are
    ``ModelLoadError`` (``UnsupportedArchitecture`` for an architecture without an adapter; an entry point that
    does not load, ``ScorerContractError`` naming it). The cache bounds apply to ``hf`` (``HFVLMScorer``'s
    vision-feature, pixel and prompt-prefix stores).
    """
    caches = {"feature_cache_bytes": feature_cache_bytes, "pixel_cache_bytes": pixel_cache_bytes,
              "prefix_cache_bytes": prefix_cache_bytes}
    if spec == "hf" and not isinstance(model, (str, os.PathLike, type(None))):
        from laya_robustness.scoring.hf import HFVLMScorer

        if processor is None:
            raise TypeError(f"load_scorer('hf', <{type(model).__name__}>) needs processor: a model object is scored "
                            f"with the processor it was loaded with")
        return HFVLMScorer.from_model(model, processor, device=device, precision=precision, batch_size=batch_size,
                                      **caches)
    if processor is not None:
        raise ValueError(f"processor goes with a loaded model object (scorer 'hf'); scorer {spec!r} with model "
                         f"{model!r} loads its own")
    settings = ScorerSettings(device or "cpu", precision, batch_size, attn_implementation, trust_remote_code, caches,
                              served)
    SCORERS.load_entry_points(ENTRY_POINT_GROUP)
    if spec in SCORERS:
        try:
            loader = SCORERS.get(spec)
        except BrokenEntry as exc:
            raise ScorerContractError(str(exc)) from exc
        return loader(spec, model, settings)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ScorerContractError(f"scorer {spec!r} is neither 'hf', {SERVED_SCORER!r} nor 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ScorerContractError(f"scorer {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ScorerContractError(f"scorer {spec!r}: module {module_name!r} has no callable {attr!r}")
    return _plugin(spec, factory)(spec, model, settings)
