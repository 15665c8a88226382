"""The adapter registry: which architectures (``config.model_type``) the HF scorer supports, and how."""

from __future__ import annotations

from laya_robustness.scoring.adapters.default import Adapter
from laya_robustness.scoring.adapters.gemma import Gemma3Adapter, PaliGemmaAdapter
from laya_robustness.scoring.adapters.idefics import Idefics2Adapter, IdeficsAdapter
from laya_robustness.scoring.adapters.llava import LlavaAdapter, LlavaOnevisionAdapter
from laya_robustness.scoring.adapters.qwen2_vl import Qwen2VLAdapter

ADAPTERS: tuple[type[Adapter], ...] = (IdeficsAdapter, Idefics2Adapter, LlavaAdapter, LlavaOnevisionAdapter, Qwen2VLAdapter,
                                       PaliGemmaAdapter, Gemma3Adapter)
SUPPORTED: dict[str, type[Adapter]] = {t: a for a in ADAPTERS for t in a.model_types}


def adapter_class(model_type: str) -> type[Adapter] | None:
    """The adapter of a ``config.model_type``, or None when it is not supported."""
    return SUPPORTED.get(model_type)


__all__ = ["ADAPTERS", "SUPPORTED", "Adapter", "adapter_class"]
