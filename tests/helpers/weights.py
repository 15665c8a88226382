"""A checkpoint's weights digest recomputed apart from the package, to check the identity it gives."""

import hashlib
from pathlib import Path


def tensors_digest(checkpoint: Path) -> str:
    """A checkpoint's weights digest recomputed here, apart from the package (numpy, not torch): sha256 of the
    sorted distinct ``<dtype> <shape> <sha256 of the bytes>`` lines of every tensor of its safetensors files."""
    from safetensors.numpy import load_file

    lines = {f"{array.dtype} {tuple(array.shape)} {hashlib.sha256(array.tobytes()).hexdigest()}"
             for path in sorted(Path(checkpoint).glob("*.safetensors")) for array in load_file(path).values()}
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
