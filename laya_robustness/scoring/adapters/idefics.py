"""Idefics3 / SmolVLM and Idefics2: pixel tiles with a pixel mask per image, features from the connector."""

from __future__ import annotations

import re

from laya_robustness.scoring.adapters.default import Adapter


class IdeficsAdapter(Adapter):
    """Idefics3 / SmolVLM: the processor's image splitting and placeholder text need nothing beyond the default."""

    name = "idefics"
    model_types = ("idefics3",)


class Idefics2Adapter(IdeficsAdapter):
    """Idefics2's processor expands ``<image>`` in its own ``__call__``; these are the same three string steps."""

    name = "idefics2"
    model_types = ("idefics2",)

    def _image_text(self) -> str:
        fake, image = self.processor.fake_image_token, self.processor.image_token
        text = f"{fake}{image * self.processor.image_seq_len}{fake}"
        return text * 5 if self.processor.image_processor.do_image_splitting else text

    def process_group(self, images):
        tensors = self.processor.image_processor([list(images)], **self.images_kwargs)
        return ({k: v for k, v in tensors.items() if k in self._vision_params},
                [self.processor.image_token] * len(images))

    def expand(self, text, replacements):
        fake = self.processor.fake_image_token
        text = text.replace(self.processor.image_token, self._image_text())
        text = text.replace(f"{fake}{fake}", fake)
        return re.sub(rf"{re.escape(fake)}(?=[^\s<])", f"{fake} ", text)
