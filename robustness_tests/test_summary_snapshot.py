"""summary.json, rounded, against the reviewed snapshot of this model and run configuration."""

import json
from pathlib import Path

import pytest

from laya_robustness.pytest_plugin.snapshot import (
    COMPARED_ON_CONTROLLER,
    SnapshotOutcome,
    accept_command,
    serialized,
    snapshot_changes,
    snapshot_name,
    snapshot_view,
    summary_snapshot,
)


@pytest.fixture
def snapshot(request):
    """This configuration's summary snapshot (in place of syrupy's ``snapshot``: ``summary_snapshot``), so an update
    writes its own file and never deletes another configuration's."""
    return summary_snapshot(request)


def test_summary_snapshot(robustness, device, snapshot, request):
    """Every family's metrics equal the snapshot; ``--snapshot-update`` records or accepts new numbers."""
    name = snapshot_name(robustness, device)
    expected = snapshot(name=name)
    stored = Path(expected.extension.get_location(test_location=expected.test_location, index=expected.index))
    if not stored.exists() and not request.config.option.update_snapshots:
        pytest.skip(f"no snapshot yet for this configuration ({name}): nothing to compare with. Record one "
                    f"with `{accept_command(request.config)}` and review it in the PR")
    if hasattr(request.config, "workerinput"):  # an xdist worker holds only its own share of the records
        robustness.defer_snapshot(device, name, stored, request.node.nodeid)
        pytest.skip(COMPARED_ON_CONTROLLER)
    view = snapshot_view(robustness, device)
    changes = []
    if stored.exists() and not request.config.option.update_snapshots:
        changes = snapshot_changes(json.loads(stored.read_text(encoding="utf-8")), json.loads(serialized(view)))
        if changes:  # the terminal summary lists them too
            robustness.snapshot_outcomes.append(SnapshotOutcome(device, name, False, changes=tuple(changes)))
    # what moved is listed once, in the terminal summary ("summary snapshot ... DIFFERS")
    assert view == expected, f"{len(changes)} change(s): see 'summary snapshot ({device}) DIFFERS' below"
