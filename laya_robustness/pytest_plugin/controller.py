"""``XdistController``: the plugin object of xdist's controller, registered by ``GatePlugin`` only where the process
runs tests on xdist workers (``-n N``, ``--dist``), so its hooks run nowhere else: the time-left estimate from the
tests a worker collected, the scheduler that keeps a dataset's tests on one worker, the run each worker joins and
what each worker's run did, merged into the controller's (``pytest_plugin.xdist``)."""

from __future__ import annotations

import os
import shlex

import pytest

from laya_robustness.pytest_plugin.estimate import show_time_left
from laya_robustness.pytest_plugin.session import DATASETS_KEY, RUN_KEY


class XdistController:
    """The controller's hooks, over the controller's part of the run (``role``: a ``roles.Lead``)."""

    #: The name it is registered under.
    name = "laya-robustness-xdist-controller"

    def __init__(self, role):
        self.role = role

    @staticmethod
    def wanted(config: pytest.Config) -> bool:
        """Whether this process is xdist's controller: tests go to workers (not itself a worker)."""
        return not hasattr(config, "workerinput") and config.getoption("dist", default="no") not in ("no", None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        # under xdist the controller knows the tests by their ids, from the first worker that collected them
        state = self.role.state
        if state.usage_error is None and not node.config.option.collectonly:
            show_time_left(node.config, state, list(ids), workers=int(node.config.getoption("numprocesses", 1) or 1))

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        # -n alone: one worker per dataset (see pytest_plugin.xdist); an explicit --dist is the user's choice
        if not schedules_datasets(config):
            return None
        from laya_robustness.pytest_plugin.xdist import DatasetScheduling

        return DatasetScheduling(config, log, self.role.state.datasets_for_collection())

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # the workers share the controller's run: its lock of --report-dir, its journal names
        node.workerinput[RUN_KEY] = self.role.state.run.run_identity.as_dict()
        # and whether each gets whole datasets, so it can stream a dataset's cells as its first test starts
        node.workerinput[DATASETS_KEY] = schedules_datasets(self.role.config)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        from laya_robustness.pytest_plugin.xdist import PAYLOAD_KEY, merge_payload

        payload = getattr(node, "workeroutput", {}).get(PAYLOAD_KEY)
        if payload:
            merge_payload(self.role.state, payload)


def schedules_datasets(config: pytest.Config) -> bool:
    """Whether the controller gives each worker whole datasets (``DatasetScheduling``): -n without --dist."""
    return config.getoption("dist", default="no") == "load" and not _dist_given(config)


def _dist_given(config: pytest.Config) -> bool:
    """Whether the user chose an xdist mode (--dist / -d / --distload) on the command line or in addopts."""
    words = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
             *config.getini("addopts")]
    return any(w in ("-d", "--distload", "--dist") or w.startswith("--dist=") for w in words)
