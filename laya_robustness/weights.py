"""The identity of a model's weights: one digest over its tensors, the same from a checkpoint directory's weight
files (``weight_hashes``) and from the model in memory (``model_weight_hashes``), whatever the tensors are named and
however they are sharded; ``short_hashes`` for a message, ``combined_sha256`` to fold an identity into one digest.
torch and safetensors are imported only to hash."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Mapping

#: What weights a checkpoint directory holds: safetensors files, and pickled weights named as ``from_pretrained``
#: names them (``pytorch_model*.bin``). What else a Trainer's checkpoint holds (training_args.bin, optimizer.pt,
#: scheduler.pt, rng_state.pth) is not the model: two checkpoints of the same weights have the same hashes.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
PICKLED_WEIGHTS_PREFIX = "pytorch_model"
#: The key of a model's weights in an identity's ``weights_sha256``: one digest over its tensors.
TENSORS = "tensors"


def is_weight_file(name: str) -> bool:
    """Whether a file of a checkpoint directory holds the model's weights (see ``WEIGHT_SUFFIXES``).

    >>> [is_weight_file(n) for n in ("model.safetensors", "pytorch_model-00001-of-00002.bin", "training_args.bin",
    ...                              "optimizer.pt", "config.json")]
    [True, True, False, False, False]
    """
    path = Path(name)
    return path.suffix == ".safetensors" or (path.suffix in WEIGHT_SUFFIXES and name.startswith(PICKLED_WEIGHTS_PREFIX))


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


def combined_sha256(hashes: Mapping[str, str]) -> str:
    """sha256 of the sorted ``<key>:<sha256>`` lines of a ``weight_hashes``: one digest for the whole identity.

    >>> combined_sha256({"tensors": "ab"}) == hashlib.sha256(b"tensors:ab\\n").hexdigest()
    True
    """
    return hashlib.sha256("".join(f"{name}:{h}\n" for name, h in sorted(hashes.items())).encode()).hexdigest()


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


def _sharded_by_fsdp2(model) -> bool:
    """Whether a module of ``model`` was sharded by FSDP2's ``fully_shard`` (never without torch.distributed)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def _state(model) -> dict:
    """``model.state_dict()``; for a model sharded by FSDP2, the same tensors as its modules hold them now (their
    parameters and persistent buffers)."""
    if not _sharded_by_fsdp2(model):
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
