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

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from laya_robustness.scoring.base import ModelLoadError, UnsupportedArchitecture

#: What weights a checkpoint directory holds: safetensors files, and pickled weights named as ``from_pretrained``
#: names them (``pytorch_model*.bin``). What else a Trainer's checkpoint holds (training_args.bin, optimizer.pt,
#: scheduler.pt, rng_state.pth) is not the model: two checkpoints of the same weights have the same hashes.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
PICKLED_WEIGHTS_PREFIX = "pytorch_model"
TRUTHY = ("1", "true", "yes", "on")


def is_weight_file(name: str) -> bool:
    """Whether a file of a checkpoint directory holds the model's weights (see ``WEIGHT_SUFFIXES``).

    >>> [is_weight_file(n) for n in ("model.safetensors", "pytorch_model-00001-of-00002.bin", "training_args.bin",
    ...                              "optimizer.pt", "config.json")]
    [True, True, False, False, False]
    """
    path = Path(name)
    return path.suffix == ".safetensors" or (path.suffix in WEIGHT_SUFFIXES and name.startswith(PICKLED_WEIGHTS_PREFIX))


#: The key of a model's weights in an identity's ``weights_sha256``: one digest over its tensors.
TENSORS = "tensors"


def tensor_line(tensor) -> str:
    """One tensor as the weights' digest counts it: ``<dtype> <shape> <sha256 of its bytes>`` (one tensor at a time;
    a tensor on a device is copied to the CPU alone). A tensor whose storage can grow is read from a copy: numpy's
    view of a storage leaves it unable to grow for good, and FSDP2 frees and refills the storage of the weights it
    gathers."""
    import torch

    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    raw = tensor.contiguous().reshape(-1).view(torch.uint8)
    raw = (raw.clone() if raw.untyped_storage().resizable() else raw).numpy()
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)} {hashlib.sha256(raw).hexdigest()}"


def tensor_digest(tensors) -> str:
    """sha256 of the sorted distinct ``tensor_line`` of ``tensors``: what a checkpoint's files and the same weights
    in memory share whatever they are named, however they are sharded, and whether tied tensors are stored once
    (a saved checkpoint) or twice (a model's state dict)."""
    return hashlib.sha256("\n".join(sorted({tensor_line(t) for t in tensors})).encode()).hexdigest()


def _checkpoint_tensors(files):
    """Every tensor of a checkpoint's weight files, one at a time: safetensors read tensor by tensor, pickled
    weights only through ``weights_only`` loading."""
    import torch
    from safetensors import safe_open

    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as fh:
                for key in fh.keys():
                    yield fh.get_tensor(key)
        else:
            yield from torch.load(path, map_location="cpu", weights_only=True, mmap=True).values()


def weight_hashes(directory: Path) -> dict[str, str]:
    """The identity of a checkpoint directory's weights: ``{"tensors": tensor_digest(...)}`` over the tensors of its
    weight files ({} when it holds none); the same weights in memory give the same (``model_weight_hashes``)."""
    files = [path for path in sorted(Path(directory).iterdir()) if is_weight_file(path.name)]
    if not files:
        return {}
    return {TENSORS: tensor_digest(_checkpoint_tensors(files))}


def short_hashes(hashes: Mapping[str, str] | None) -> str:
    """A ``weights_sha256`` with the first 12 hex digits of each digest, for a message.

    >>> short_hashes({"tensors": "0eaaf349490c1fb5686b"})
    'tensors 0eaaf349490c'
    """
    return ", ".join(f"{name} {digest[:12]}" for name, digest in sorted((hashes or {}).items())) or "(none found)"


def model_weight_hashes(model) -> dict[str, str]:
    """``weight_hashes`` of a model in memory, from its state dict's tensors as they are: nothing is written or
    copied (a tensor on a device comes to the CPU one at a time). A model carrying peft adapters (``peft_config``:
    LoRA and the other adapter kinds, whose tensors peft names ``...<kind>_A.<adapter>.weight``) adds ``base``,
    the digest of the other tensors (its base checkpoint's ``tensors`` while the base is frozen), and ``adapter``,
    the digest of the adapters' own. A model sharded by FSDP2 is read module by module (its ``state_dict`` would put
    the shards back in place), a tensor still sharded over the ranks (a DTensor) gathered whole first (a collective:
    every rank hashes together), so a sharded model has its saved checkpoint's identity."""
    state = {key: _whole(t) for key, t in _state(model).items()}
    hashes = {TENSORS: tensor_digest(state.values())}
    names = set(getattr(model, "peft_config", None) or ())
    if names:
        own = {key for key in state if names & set(key.split("."))}
        hashes["base"] = tensor_digest(t for key, t in state.items() if key not in own)
        hashes["adapter"] = tensor_digest(state[key] for key in own)
    return hashes


def _state(model) -> dict:
    """``model.state_dict()``; for a model sharded by FSDP2, the same tensors as its modules hold them now (their
    parameters and persistent buffers)."""
    from laya_robustness.scoring.sharded import fsdp2_modules

    if not fsdp2_modules(model):
        return model.state_dict()
    out = {}
    for prefix, module in model.named_modules():
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None and name not in module._non_persistent_buffers_set:
                out[f"{prefix}.{name}" if prefix else name] = tensor
    return out


def _whole(tensor):
    """``tensor`` whole: a DTensor's full tensor (gathered from every rank), any other tensor as it is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


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
