"""overlay: red distracting text (YES, NO, Answer "Yes"...) written across the image's centre."""

import pytest

pytestmark = pytest.mark.overlay


def test_overlay(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("overlay", dataset, device)
