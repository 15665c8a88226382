"""A pytest process's part of a gate run, which ``GatePlugin`` picks once, in ``pytest_configure``: ``Lead`` (a run
without xdist, or xdist's controller: it ends the run and says its verdict) or ``Worker`` (an xdist worker: it scores
its share of the tests and sends what it did to the controller). Each makes the process's ``RobustnessSession``."""

from __future__ import annotations

import pytest

from laya_robustness.pytest_plugin.estimate import show_time_left
from laya_robustness.pytest_plugin.selection import narrowed_by, planned_cells, selected_by
from laya_robustness.pytest_plugin.session import DATASETS_KEY, RUN_KEY, RobustnessSession
from laya_robustness.run.errors import EXIT_HARNESS, EXIT_USAGE, HarnessError, UsageError
from laya_robustness.run.judged import no_cell_judged
from laya_robustness.run.outcome import Ending, RunOutcome
from laya_robustness.run.outputs.lock import RunIdentity


class Lead:
    """The process that ends the run: it reaches a served endpoint first, says the plan and the time left, judges
    the summary snapshot where xdist's workers deferred it, writes the reports and says the verdict."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.state = RobustnessSession(config)

    def start(self) -> None:
        # A served model's endpoint is reached once, before anything is collected: a dead one ends the run at once.
        if self.state.served:
            unreachable = self.state.run.scorers.endpoint_unreachable()
            if unreachable:
                pytest.exit(f"harness error (exit 3, not a gate failure): {unreachable}", returncode=EXIT_HARNESS)

    def cannot_start(self, items: list[pytest.Item], status: int, error: Exception) -> None:
        """A problem found before any test runs: a usage error is pytest's (exit 4); any other ends the run with
        ``status`` and its message."""
        if status == EXIT_USAGE:
            raise error
        pytest.exit(str(error), returncode=status)

    def plans_at_collection(self) -> bool:
        """It plans every selected cell once collected (``pytest_collection_finish``)."""
        return True

    def test_starts(self, item: pytest.Item) -> None:
        pass

    def collected(self, session: pytest.Session) -> None:
        show_time_left(self.config, self.state, [i.nodeid for i in session.items],
                       skipped={i.nodeid for i in session.items if i.get_closest_marker("skip") is not None})

    def tests_ended(self, session: pytest.Session, stopped: bool) -> None:
        from laya_robustness.pytest_plugin.snapshot import leave_syrupy_out

        leave_syrupy_out(session, self.state, stopped)

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        state = self.state
        if state.start_error is not None:  # an xdist worker could not claim --report-dir: nothing ran
            session.exitstatus = state.start_error[0]
            return
        if state.deferred_snapshots and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            from laya_robustness.pytest_plugin.snapshot import compare_on_controller

            compare_on_controller(session, state)
        compared = len(state.snapshot_outcomes)  # a snapshot compared on the controller judged the run's cells
        state.tally.judged, state.tally.cells = state.tally.judged + compared, state.tally.cells + compared
        selected = selected_by(session.config, bool(session.shouldstop or session.shouldfail))
        nothing = state.nothing_judged = self._nothing_judged(session, selected)
        outcome = state.run.finish(self._ending(session, exitstatus, nothing))
        if selected:  # before this run's reports replace the earlier run's
            from laya_robustness.pytest_plugin.earlier import folded

            outcome = outcome.with_folded(folded(outcome, state.run.settings.report_dir))
        if state.run.has_reports():
            outcome = self._written(outcome)
        state.outcome = outcome
        if outcome.exit_status != outcome.caller_status:
            session.exitstatus = outcome.exit_status

    def summary(self, reporter) -> None:
        from laya_robustness.pytest_plugin.terminal import write_summary

        write_summary(reporter, self.state)

    def _ending(self, session: pytest.Session, exitstatus: int, nothing_judged) -> Ending:
        """How pytest's side of the run ended (``run.outcome.Ending``): its exit status, an exit status that ended
        the run before its tests did (interrupted, an internal error), a stop on purpose (``-x``, ``--maxfail``, a
        lost endpoint), the selection options that left cells out, and whether the run judged nothing."""
        ended = None
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
            ended = f"the run ended with exit status {int(exitstatus)} ({pytest.ExitCode(exitstatus).name})"
        stopped = session.shouldstop or session.shouldfail or None
        narrowed = narrowed_by(session.config, self.state.run.settings.families, bool(stopped))
        return Ending(status=int(session.exitstatus), ended=ended, stopped=stopped and str(stopped),
                      narrowed_by=tuple(narrowed), nothing_judged=nothing_judged)

    def _nothing_judged(self, session: pytest.Session, selected: list[str]):
        """Why a run that would pass judged nothing (``run.judged``): every check it asked for skipped, or its test
        selection left out every cell the gate collected; None when it judged, or asked for the benchmarks alone."""
        if session.exitstatus != pytest.ExitCode.OK or session.config.getoption("benchmark_only", False) \
                or session.config.option.collectonly:  # a collection judges nothing, and claims nothing
            return None
        state = self.state
        benchmarks = any("benchmark" in getattr(item, "fixturenames", ()) for item in session.items)
        return state.tally.nothing_judged() or (no_cell_judged(state.tally, selected, benchmarks)
                                                if state.cell_ids else None)

    def _written(self, outcome: RunOutcome) -> RunOutcome:
        """The reports written, once the run is sure it still holds --report-dir (under xdist the controller claims
        it here)."""
        from laya_robustness.report.folder import written_to

        try:
            self.state.claim_report_dir()
        except (UsageError, HarnessError) as exc:
            return outcome.with_errors([f"the reports were not written: {exc}"])
        return written_to(outcome, self.state.run.settings.report_dir)


class Worker:
    """An xdist worker: its own GPU and CPU share, its controller's run; it sends the controller what it did, and
    leaves the endpoint, the plan, the snapshot's account and the verdict to it."""

    def __init__(self, config: pytest.Config):
        from laya_robustness.pytest_plugin.gpus import assign_worker_gpu, worker_threads

        self.config = config
        given = config.workerinput
        assign_worker_gpu(given["workerid"])  # before torch touches CUDA: before the session
        threads = worker_threads(int(given.get("workercount", 1)))
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        shared = given.get(RUN_KEY)
        self.state = RobustnessSession(config, RunIdentity.parse(shared) if shared else None, given.get("workerid"))
        self.whole_datasets = bool(given.get(DATASETS_KEY))  # given every test of a dataset it is given one of
        self.datasets_planned: set[str] = set()

    def plans_at_collection(self) -> bool:
        """Given whole datasets, it plans each dataset's cells as its first test starts (``test_starts``);
        otherwise it does not know which of the collected tests it will run, and plans none."""
        return False

    def test_starts(self, item: pytest.Item) -> None:
        """At the first test of a dataset it is given whole, the cells that dataset's selected family tests will
        ask for are planned (``GateRun.plan(then=True)``), so they are scored as one stream as in one process."""
        state = self.state
        if not self.whole_datasets or state.usage_error is not None or not state.run.executor.streams:
            return
        from laya_robustness.pytest_plugin.xdist import dataset_scope

        datasets = state.datasets_for_collection()
        scope = dataset_scope(item.nodeid, datasets)
        if not scope.startswith("dataset:") or scope in self.datasets_planned:
            return
        self.datasets_planned.add(scope)
        items = [i for i in item.session.items if dataset_scope(i.nodeid, datasets) == scope]
        state.run.plan(planned_cells(items, state.run), then=True)

    def start(self) -> None:
        pass

    def cannot_start(self, items: list[pytest.Item], status: int, error: Exception) -> None:
        """A worker cannot stop the run from its collection (xdist would report it crashed): none of its tests
        run, and the controller ends with ``status`` and the message."""
        self.state.start_error = (status, str(error))
        self.config.hook.pytest_deselected(items=list(items))
        items[:] = []

    def collected(self, session: pytest.Session) -> None:
        pass

    def tests_ended(self, session: pytest.Session, stopped: bool) -> None:
        pass

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        from laya_robustness.pytest_plugin.xdist import PAYLOAD_KEY, worker_payload

        session.config.workeroutput[PAYLOAD_KEY] = worker_payload(self.state)

    def summary(self, reporter) -> None:
        pass
