"""A pytest-native robustness gate for vision-language models: families, scorers, metrics, the pytest plugin and
the gate as a Python call (``run_gate``; imported when first used, so importing the package stays light)."""

from __future__ import annotations

#: The names of the Python API, and the module each lives in.
_API = {"run_gate": "laya_robustness.api", "GateResult": "laya_robustness.api", "Failure": "laya_robustness.api",
        "UsageError": "laya_robustness.run.errors", "HarnessError": "laya_robustness.run.errors"}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'laya_robustness' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_API[name]), name)
