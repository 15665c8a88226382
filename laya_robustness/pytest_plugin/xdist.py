"""Under xdist: a scheduler that keeps every gate test of one dataset on one worker, and what a worker sends
the controller (its records, check results, the cells it judged, the tally of its checks, harness errors,
identities, scorer counters, invariance stats, deferred snapshots and what claiming the report folder did), merged
there into the controller's session.

A dataset's family tests all need its orig records; spread over workers, each worker would score
the orig rows again. ``DatasetScheduling`` is xdist's ``--dist loadscope`` with the dataset as the
scope: a test whose parameters name a dataset (``test_shift[colour_choice-cpu]``) joins that
dataset's unit of work; every other test (invariance, benchmarks, the snapshot, the --baseline
comparisons, a project's own tests) joins its module's, so what a module shares (the invariance
references, a module-scoped server) is made once. It is what ``-n N`` uses unless ``--dist`` is
given. (xdist's own ``loadgroup`` would do the same from ``xdist_group`` marks, but on pytest 9 it
cannot rename the test ids it groups by.)

>>> dataset_scope("robustness_tests/test_shift.py::test_shift[count_choice-gpu]", ["colour_choice", "count_choice"])
'dataset:count_choice'
>>> dataset_scope("robustness_tests/test_invariance.py::test_invariance[cpu-hostile]", ["colour_choice"])
'robustness_tests/test_invariance.py'
"""

from __future__ import annotations

import json
from typing import Sequence

from xdist.scheduler import LoadScopeScheduling


#: The key of the gate's payload in a worker's ``workeroutput``.
PAYLOAD_KEY = "laya_robustness"


def dataset_scope(nodeid: str, datasets: Sequence[str]) -> str:
    """``dataset:<name>`` when one of the test's parameters is a dataset's name (the longest that fits),
    else the test's module."""
    module = nodeid.split("::", 1)[0]
    _, bracket, params = nodeid.partition("[")
    if not bracket:
        return module
    params = params.removesuffix("]")
    for name in sorted(datasets, key=len, reverse=True):
        if params == name or params.startswith(f"{name}-") or params.endswith(f"-{name}") or f"-{name}-" in params:
            return f"dataset:{name}"
    return module


class DatasetScheduling(LoadScopeScheduling):
    """``--dist loadscope`` with one scope per dataset (see the module doc)."""

    def __init__(self, config, log=None, datasets: Sequence[str] = ()):
        super().__init__(config, log)
        self.datasets = list(datasets)

    def _split_scope(self, nodeid: str) -> str:
        return dataset_scope(nodeid, self.datasets)


def worker_payload(session) -> str:
    """What a worker sends the controller, as JSON: its run's part (``GateRun.worker_payload``) and its session's."""
    return json.dumps({**session.run.worker_payload(), "snapshots": session.deferred_snapshots,
                       "start_error": session.start_error, "tally": session.tally.as_dict(),
                       "snapshot_tests": sorted(session.snapshot_tests), "cell_tests": sorted(session.cell_ids)})


def merge_payload(session, payload: str) -> None:
    """Add a worker's run (``GateRun.merge_worker``), its checks' tally, start error, snapshots and cell tests."""
    data = json.loads(payload)
    session.run.merge_worker(data)
    session.tally.merge(data["tally"])
    session.snapshot_tests |= set(data["snapshot_tests"])
    session.cell_ids |= set(data["cell_tests"])
    if data["start_error"] and session.start_error is None:
        session.start_error = tuple(data["start_error"])
    for snapshot in data["snapshots"]:
        if snapshot not in session.deferred_snapshots:
            session.deferred_snapshots.append(snapshot)
