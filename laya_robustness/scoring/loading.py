"""Loading a Hugging Face checkpoint for scoring: where it is, whether it is supported, its processor and weights.

- A local directory is used as is; a hub id is looked up in the local cache first and, when it is
  absent and ``HF_HUB_OFFLINE`` is set, refused at once (no retries).
- The architecture (``config.model_type``) must have an adapter, else ``UnsupportedArchitecture``.
- The processor comes from ``AutoProcessor``; where that fails because a video processor needs
  torchvision (Qwen2-VL, LLaVA-OneVision), the same processor class is built from the tokenizer,
  the PIL image processor and the saved chat template, without a video processor.
- Weights load with safetensors when present, pickled weights only through ``weights_only`` loading;
  remote code only with ``trust_remote_code=True``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from laya_robustness.scoring.base import ModelLoadError, UnsupportedArchitecture

TRUTHY = ("1", "true", "yes", "on")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUTHY


def resolve_checkpoint(name_or_path: str) -> Path | None:
    """The local directory of a checkpoint: the path itself, or the hub id's snapshot in the local cache.

    None for a hub id that is not cached (it may then be downloaded); ``ModelLoadError`` at once when
    it is not cached and ``HF_HUB_OFFLINE`` is set.
    """
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists() or name_or_path.startswith((".", "/")) or name_or_path.count("/") > 1:
        raise ModelLoadError(f"model {name_or_path!r}: not a checkpoint directory and not a hub id")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception as exc:  # not in the local cache
        if hub_offline():
            raise ModelLoadError(f"model {name_or_path!r} is not in the local Hugging Face cache and "
                                 f"HF_HUB_OFFLINE is set: download it first or pass a local directory") from exc
        return None


def supported_adapter(config):
    """The adapter class for ``config``, or ``UnsupportedArchitecture`` naming it and the supported ones."""
    from laya_robustness.scoring.adapters import SUPPORTED, adapter_class

    model_type = getattr(config, "model_type", None)
    adapter = adapter_class(model_type)
    if adapter is None:
        architectures = ", ".join(getattr(config, "architectures", None) or []) or "unknown class"
        raise UnsupportedArchitecture(
            f"architecture {model_type!r} ({architectures}) is not supported by the hf scorer; supported: "
            f"{', '.join(sorted(SUPPORTED))} (or plug in your own scorer with --scorer module:factory)")
    return adapter


def _needs_torchvision(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "orchvision" in text or "VIDEO_PROCESSOR_MAPPING" in text


def without_video_processor(processor_class):
    """``processor_class`` accepting ``video_processor=None`` (its class check fails without torchvision)."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and argument is None:
            return None
        return processor_class.check_argument_for_proper_class(self, argument_name, argument)

    return type(processor_class.__name__, (processor_class,),
                {"check_argument_for_proper_class": check_argument_for_proper_class,
                 "__module__": processor_class.__module__})


def processor_without_video(source: str | Path, trust_remote_code: bool = False):
    """The checkpoint's processor class built from its tokenizer, image processor and chat template only."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    directory = Path(source)
    saved = json.loads((directory / "processor_config.json").read_text()) \
        if (directory / "processor_config.json").is_file() else {}
    class_name = saved.pop("processor_class", None)
    if not class_name:
        raise ModelLoadError(f"{source}: processor_config.json names no processor_class")
    processor_class = getattr(transformers, class_name)
    saved = {k: v for k, v in saved.items() if not isinstance(v, dict)}  # sub-processor configs load on their own
    template = None
    if (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text()
    elif (directory / "chat_template.json").is_file():
        template = json.loads((directory / "chat_template.json").read_text()).get("chat_template")
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=trust_remote_code)
    image_processor = AutoImageProcessor.from_pretrained(directory, trust_remote_code=trust_remote_code)
    template = template or getattr(tokenizer, "chat_template", None)
    return without_video_processor(processor_class)(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=None, chat_template=template, **saved)


def load_processor(source: str | Path, trust_remote_code: bool = False):
    """``AutoProcessor``, or the same processor without its video processor where torchvision is missing."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (ImportError, AttributeError) as exc:
        if not _needs_torchvision(exc):
            raise
        return processor_without_video(source, trust_remote_code)


def load_model(source: str | Path, attn_implementation: str, trust_remote_code: bool = False):
    """fp32 weights through ``AutoModelForImageTextToText``: safetensors first, pickles only as weights."""
    import torch
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(
        source, dtype=torch.float32, attn_implementation=attn_implementation, trust_remote_code=trust_remote_code,
        weights_only=True)
