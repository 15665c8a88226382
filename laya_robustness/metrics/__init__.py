"""Pure statistics over prediction records: accuracy and flips, headlines, the cluster bootstrap, calibration and
the stability, LGIP and baseline analyses; they never import families (the summary passes family facts down)."""

from __future__ import annotations

from typing import Any

DIGITS = 6


def rounded(value: Any, digits: int = DIGITS) -> Any:
    """Floats rounded to ``digits`` d.p. (never -0.0); lists and dicts recursively; anything else as is.

    >>> rounded({"a": [-0.0000001, 0.1234567]})
    {'a': [0.0, 0.123457]}
    """
    if isinstance(value, float):
        return round(value, digits) + 0.0
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value
