"""Which scorer a run uses: the Hugging Face scorer (``hf``: a checkpoint, or a model object in memory), a model
behind an OpenAI-compatible server (``openai``), a CLIP / SigLIP dual encoder probed on caption rows (``dual``) or
a plug-in factory (``module:function``): every scorer of a run is made here."""

from __future__ import annotations

import importlib
import os

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


def load_scorer(spec: str, model, *, device: str | None = None, precision: str = "auto", batch_size: int = 16,
                attn_implementation: str = "eager", trust_remote_code: bool = False,
                feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES,
                pixel_cache_bytes: int = DEFAULT_PIXEL_CACHE_BYTES,
                prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, served: dict | None = None, processor=None):
    """``hf``: a Hugging Face image-text-to-text model; ``openai``: ``model`` (None: the endpoint's only model)
    behind the OpenAI-compatible endpoint of ``served`` (``ServedScorer.connect``'s keywords: ``endpoint``,
    ``api_key_env``, ``concurrency``, ``timeout_s``); ``dual``: a CLIP / SigLIP hub id or directory
    (``DualEncoderScorer``: precision, batch size and attention apply, the caches do not); ``module:function``: a
    plug-in factory.

    With ``hf``, ``model`` is a hub id or a checkpoint directory, or a loaded model object scored as it stands
    (``HFVLMScorer.from_model``: ``processor`` is then required, ``device`` defaults to the model's own and the
    loading options do not apply). ``device`` is ``cpu`` when not given, a loaded model's own device aside.

    A plug-in factory is called as ``function(model, device=..., precision=..., batch_size=...,
    attn_implementation=...)`` and must return what ``laya_robustness.scoring.base.Scorer``
    declares (checked here: ``ScorerContractError`` otherwise). Loading failures are
    ``ModelLoadError`` (``UnsupportedArchitecture`` for an architecture without an adapter). The cache
    bounds apply to ``hf`` (``HFVLMScorer``'s vision-feature, pixel and prompt-prefix stores).
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
    device = device or "cpu"
    if spec == DUAL_SCORER:
        from laya_robustness.scoring.dual import DualEncoderScorer

        return DualEncoderScorer.from_pretrained(model, device=device, precision=precision, batch_size=batch_size,
                                                 attn_implementation=attn_implementation)
    if spec == "hf":
        from laya_robustness.scoring.hf import HFVLMScorer

        return HFVLMScorer.from_pretrained(model, device=device, precision=precision, batch_size=batch_size,
                                           attn_implementation=attn_implementation,
                                           trust_remote_code=trust_remote_code, **caches)
    if spec == SERVED_SCORER:
        from laya_robustness.scoring.served import ServedScorer

        if not served or not served.get("endpoint"):
            raise ScorerContractError(f"scorer {spec!r} needs an endpoint (--endpoint)")
        settings = dict(served)
        return ServedScorer.connect(settings.pop("endpoint"), model, **settings)
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
    scorer = factory(model, device=device, precision=precision, batch_size=batch_size,
                     attn_implementation=attn_implementation)
    return check_scorer(scorer, f"plug-in {spec!r}")
