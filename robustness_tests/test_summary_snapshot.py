"""summary.json, rounded, against the reviewed snapshot of this model and run configuration."""

import pytest
from syrupy.extensions.json import JSONSnapshotExtension


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def test_summary_snapshot(robustness, device, snapshot_json):
    """Every family's metrics equal the snapshot; ``--snapshot-update`` accepts new numbers."""
    assert robustness.snapshot_view(device) == snapshot_json(name=robustness.snapshot_name(device))
