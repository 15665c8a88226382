"""language: the question in other languages, asking for an English answer."""

import pytest

pytestmark = pytest.mark.language


def test_language(robustness, dataset, device):
    """The share of changed answers (AV) and of samples changed at least once (V) stay within thresholds.toml."""
    robustness.check_family("language", dataset, device)
