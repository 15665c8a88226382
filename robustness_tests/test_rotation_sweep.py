"""rotation_sweep: the image turned 30..330 degrees (opt-in: --families rotation_sweep)."""

import pytest

pytestmark = [pytest.mark.rotation_sweep, pytest.mark.slow]  # opt-in: 11 variants per row


def test_rotation_sweep(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("rotation_sweep", dataset, device)
