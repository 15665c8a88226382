"""The readable name of a device, as the reports' meta and each Ray actor give it."""

from __future__ import annotations

import platform


def device_name(device: str) -> str:
    """A readable name of the device: the CUDA device's name, or the CPU's platform string."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.machine()}, {platform.processor() or 'unknown processor'})"
