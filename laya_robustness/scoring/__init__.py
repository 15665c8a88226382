"""Scorers turn rows into one logit per option (label order); ``load_scorer`` picks the adapter."""

from __future__ import annotations

import importlib


def load_scorer(spec: str, model: str, **kwargs):
    """``hf``: a Hugging Face image-text-to-text model; ``module:function``: a plug-in factory.

    A plug-in factory is called as ``function(model, device=..., precision=..., batch_size=...,
    attn_implementation=...)`` and returns an object with ``score_batch``, ``score_predict``
    and an ``identity`` dict (see ``laya_robustness.scoring.base.Scorer``).
    """
    if spec == "hf":
        from laya_robustness.scoring.hf import HFVLMScorer

        return HFVLMScorer.from_pretrained(model, **kwargs)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"scorer {spec!r} is neither 'hf' nor 'module:function'")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(model, **kwargs)
