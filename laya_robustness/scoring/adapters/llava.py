"""LLaVA-1.5, LLaVA-NeXT (anyres tiles and ``image_sizes``) and LLaVA-OneVision."""

from __future__ import annotations

from laya_robustness.scoring.adapters.default import Adapter


class LlavaAdapter(Adapter):
    """One projector output per image; LLaVA-NeXT's tile count follows ``image_sizes``."""

    name = "llava"
    model_types = ("llava", "llava_next")


class LlavaOnevisionAdapter(LlavaAdapter):
    """OneVision tiles an image only when it is alone in its row, so a row's images are preprocessed together."""

    name = "llava_onevision"
    model_types = ("llava_onevision",)

    def image_groups(self, images):
        return [tuple(images)] if len(images) > 1 else [(im,) for im in images]
