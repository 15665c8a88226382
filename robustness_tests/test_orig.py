"""orig: the unperturbed source rows."""

import pytest

pytestmark = pytest.mark.orig


def test_orig(robustness, dataset, device):
    """Accuracy (and calibration, where limited) of the unperturbed rows hold."""
    robustness.check_family("orig", dataset, device)
