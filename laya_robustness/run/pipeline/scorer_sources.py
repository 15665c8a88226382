"""Which models a run scores with: the kind of a checkpoint (a dual encoder or a question model), the weights a
checkpoint holds, where a scorer's identity is kept, and loading the scorer of a row source on a device."""

from __future__ import annotations

import json
from pathlib import Path

#: ``config.model_type`` of the dual encoders (CLIP / SigLIP): they answer no questions, they are probed.
DUAL_ENCODER_TYPES = ("clip", "siglip")
#: The row sources a scorer is loaded for: the question rows, and the caption rows a dual encoder probes.
SOURCES = ("rows", "captions")


def model_type(name_or_path: str) -> str | None:
    """The checkpoint's ``config.model_type``, read from a local directory or the local hub cache only
    (never the network: an id that is not cached gives None)."""
    path = Path(name_or_path)
    if path.is_dir():
        try:
            return json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name_or_path, "config.json")
    except Exception:  # not a valid repo id, or no cache at all
        return None
    return model_type(str(Path(cached).parent)) if isinstance(cached, str) else None


def is_dual_encoder(name_or_path: str) -> bool:
    """Whether the checkpoint is a CLIP / SigLIP dual encoder (read offline; see :func:`model_type`)."""
    return model_type(name_or_path) in DUAL_ENCODER_TYPES


def expected_weights(model: str | None, scorer: str) -> dict[str, str] | None:
    """The digest of ``model``'s weights as this machine finds them (``weights_sha256`` of the identity
    a scorer loading it reports), or None where this machine cannot tell: a served model or a plug-in
    (``scorer`` other than hf), or a hub id missing from the local cache. A Ray run checks its actors' weights
    against these before any row is scored."""
    if model is None or scorer != "hf":
        return None
    from laya_robustness.scoring.base import ModelLoadError
    from laya_robustness.scoring.loading import resolve_checkpoint
    from laya_robustness.weights import weight_hashes

    try:
        local = resolve_checkpoint(model)
    except ModelLoadError:  # the actors will fail to load it as well, saying why
        return None
    return weight_hashes(local) if local is not None else None


def identity_key(device: str, source: str) -> str:
    """Where a scorer's identity is kept: the device for the question model, ``<device>/dual`` for captions."""
    return device if source == "rows" else f"{device}/dual"


def load_source_scorer(settings, model, device: str, dual: bool):
    """The scorer of one row source on ``device``, made by the scorer factory (``scoring.factory.load_scorer``): a
    dual encoder (``dual``), or the run's ``--scorer`` (hf, a served model, or a plug-in) on ``model`` (a hub id or
    a directory; the model in memory of ``settings.in_memory``, as it stands), with the run's precision, batch
    size, attention and cache bounds (``settings``: the run's parsed options). Raises whatever loading raises."""
    from laya_robustness.scoring.factory import DUAL_SCORER, SERVED_SCORER, load_scorer

    s = settings
    in_memory = None if dual else s.in_memory
    if in_memory is not None:
        from laya_robustness.scoring.in_memory import unwrapped

        model = unwrapped(in_memory.model)  # the transformers model under its wrappers (a peft model's base)
    spec = DUAL_SCORER if dual else s.scorer
    served = {"endpoint": s.endpoint, "api_key_env": s.api_key_env, "concurrency": s.concurrency,
              "timeout_s": s.request_timeout} if spec == SERVED_SCORER else None
    return load_scorer(spec, model, device=device, precision=s.precision, batch_size=s.batch_size,
                       attn_implementation=s.attn_implementation, feature_cache_bytes=s.feature_cache_mb << 20,
                       pixel_cache_bytes=s.pixel_cache_mb << 20, prefix_cache_bytes=s.prefix_cache_mb << 20,
                       served=served, processor=None if in_memory is None else in_memory.processor)
