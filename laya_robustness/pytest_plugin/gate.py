"""``GatePlugin``: the pytest plugin object of the gate, whose methods are the plugin's hooks. The package registers it
as pytest registers the package (``pytest_addhooks``), so its hooks keep the package's place among other plugins'
(syrupy's, pytest-benchmark's: pytest calls those registered later first). In ``pytest_configure`` it picks this
process's part of the run (``roles.Lead``, or ``roles.Worker`` in an xdist worker), which holds the process's
``RobustnessSession``, and, in xdist's controller only, registers ``controller.XdistController`` (xdist's hooks); the
hooks take the run from collection to the verdict."""

from __future__ import annotations

import pytest

from laya_robustness.pytest_plugin import pytest_options
from laya_robustness.pytest_plugin.controller import XdistController
from laya_robustness.pytest_plugin.gate_tests import FAMILY_ATTRIBUTE, markers
from laya_robustness.pytest_plugin.roles import Lead, Worker
from laya_robustness.pytest_plugin.selection import planned_cells
from laya_robustness.pytest_plugin.session import GPU_DEVICE, RobustnessSession
from laya_robustness.run.errors import EXIT_HARNESS, EXIT_USAGE, HarnessError, UsageError
from laya_robustness.run.judged import NO_CUDA


class GatePlugin:
    """The gate's pytest plugin (see the module doc). ``state`` is the process's session, what the gate's tests
    receive as the ``robustness`` fixture; ``role`` what the process does that another would not."""

    #: The name it is registered under (``config.pluginmanager.get_plugin``).
    name = "laya-robustness-gate"

    def __init__(self):
        self.config: pytest.Config | None = None
        self.role: Lead | Worker | None = None

    @property
    def state(self) -> RobustnessSession:
        return self.role.state

    def pytest_configure(self, config: pytest.Config) -> None:
        from laya_robustness.pytest_plugin.terminal import narrow_benchmark_table

        narrow_benchmark_table(config)  # before pytest-benchmark's pytest_configure (trylast) reads it
        for name, text in markers().items():
            config.addinivalue_line("markers", f"{name}: {text}")
        workers = config.getoption("numprocesses", default=None)
        if config.getoption("update_snapshots", default=False) and workers not in (None, 0, 1):
            raise pytest.UsageError("--snapshot-update cannot run under xdist (-n > 1): syrupy can truncate "
                                    "snapshot files when workers write them; rerun with -n 0")
        self.config = config
        _terminate_as_interrupt(config)
        self.role = Worker(config) if hasattr(config, "workerinput") else Lead(config)  # the one place that asks
        if XdistController.wanted(config):  # xdist's controller: its hooks registered here only
            config.pluginmanager.register(XdistController(self.role), XdistController.name)
        if self.state.settings.keep_freed_memory:
            from laya_robustness.scoring.malloc import keep_freed_memory

            self.state.run.set_kept_freed_memory(keep_freed_memory())

    # -- hooks -------------------------------------------------------------------------------------------------

    def pytest_report_header(self) -> list[str]:
        from laya_robustness.pytest_plugin.terminal import prefix_sharing_line

        state = self.state
        if state.run.kept_freed_memory:
            lines = ["laya-robustness: malloc keeps freed memory for reuse, given back as images are let go (--keep-freed-memory yes)"]
        else:
            why = "--keep-freed-memory no" if not state.settings.keep_freed_memory else "the C library is not glibc"
            lines = [f"laya-robustness: malloc left as it is ({why})"]
        if state.served:
            lines.append(f"laya-robustness: {state.run.scorers.served_capability()}")
        if state.settings.limitations_note:
            lines.append(f"laya-robustness: {state.settings.limitations_note}")
        sharing = prefix_sharing_line(state.settings)
        return lines + ([sharing] if sharing else [])

    def pytest_sessionstart(self) -> None:
        self.role.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self) -> None:
        # Drop the gate's state (records, rows, scorers and their caches: about a million objects on the
        # embedded default) before pytest's own unconfigure runs its garbage collections; freed here by
        # reference counting it costs a fraction of what the interpreter's shutdown would spend on it.
        if self.role is not None:
            self.state.run.close()
            self.role = None

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        # Only the gate's tests (those that use the ``robustness`` fixture) get the dataset and device axes.
        if "robustness" not in metafunc.fixturenames:
            return
        state = self.state
        if "dataset" in metafunc.fixturenames:
            metafunc.parametrize("dataset", state.datasets_for_collection())
        if "caption_set" in metafunc.fixturenames:
            sets = state.caption_sets_for_collection()
            if not sets:
                reason = state.run.models.no_dual_reason(metafunc.function.__name__.removeprefix("test_")) \
                    or ("no caption rows to probe: select an lgip family and give a dual encoder (a CLIP / SigLIP "
                        "--model, or --dual-model)")
                sets = [pytest.param("none", marks=pytest.mark.skip(reason=reason))]
            metafunc.parametrize("caption_set", sets)
        if "device" in metafunc.fixturenames:
            metafunc.parametrize("device", [pytest.param(state.default_device, id="cpu"),
                                            pytest.param(GPU_DEVICE, id="gpu", marks=pytest.mark.gpu)])

    @pytest.hookimpl(tryfirst=True)  # before syrupy's: a usage error leaves it no collected test to count snapshots of
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        # slow tests (the rotation sweep, the 256M benchmark) run only when -m names them
        if "slow" not in (config.option.markexpr or ""):
            skip = pytest.mark.skip(reason="slow: not in the default run; select it with -m slow (e.g. -m 'slow and not gpu')")
            for item in items:
                if item.get_closest_marker("slow") is not None:
                    item.add_marker(skip)
        state = self.state
        self._benchmarks_when_asked(items)
        state.snapshot_tests = {i.nodeid for i in items if "snapshot" in getattr(i, "fixturenames", ())}
        state.check_ids = {i.nodeid for i in items if _is_gate_check(i)}
        state.cell_ids = {i.nodeid for i in items if _judges_cells(i)}
        gate_items = any("robustness" in getattr(i, "fixturenames", ()) for i in items)
        if state.usage_error is not None or gate_items:
            if not self._inputs_valid(items):  # bad data or thresholds: a usage error before any test runs
                return
        if gate_items and not config.option.collectonly:
            self._connect_cluster()  # an unreachable cluster stops the run before the report folder is touched
            self._claim_report_dir(items)
        # The summary snapshot needs every family: run it after the family tests.
        items.sort(key=lambda item: "snapshot" in getattr(item, "fixturenames", ()))

    def _benchmarks_when_asked(self, items: list[pytest.Item]) -> None:
        """On one's own --data the gate's benchmarks (throughput, not a verdict) run only when asked: --benchmark-only
        (just them), --benchmark-enable (with the gate) or their file named on the command line."""
        config = self.config
        asked = config.getoption("benchmark_only", False) or config.getoption("benchmark_enable", False) \
            or any("test_benchmarks" in str(arg) for arg in config.invocation_params.args)
        if asked or not self.state.run.models.own_data:
            return
        skip = pytest.mark.skip(reason="benchmarks run on your own --data when asked: --benchmark-only (just them) or "
                                       "--benchmark-enable (with the gate)")
        for item in items:
            names = getattr(item, "fixturenames", ())
            if "benchmark" in names and "robustness" in names:
                item.add_marker(skip)

    def _inputs_valid(self, items: list[pytest.Item]) -> bool:
        """Read the rows and limits (``RobustnessSession.validate_inputs``): a problem is pytest's usage error
        (exit 4), or under xdist the worker's start error (``cannot_start``)."""
        try:
            self.state.validate_inputs()
            return True
        except pytest.UsageError as exc:
            self.role.cannot_start(items, EXIT_USAGE, exc)
            return False

    def _claim_report_dir(self, items: list[pytest.Item]) -> None:
        """Hold --report-dir for this run before any test scores: another run there, or a folder that cannot be
        written, stops the run (exit 4, or 3 for a full disk) naming it (``cannot_start``)."""
        try:
            self.state.claim_report_dir()
            return
        except UsageError as exc:
            status, error = EXIT_USAGE, pytest_options.as_pytest(exc)
        except HarnessError as exc:
            status, error = EXIT_HARNESS, exc
        self.role.cannot_start(items, status, error)

    def _connect_cluster(self) -> None:
        """--executor ray: connect before any test runs; an unreachable cluster ends the run at once (exit 3)."""
        scorers = self.state.run.scorers
        try:
            scorers.connect_cluster()
        except HarnessError as exc:
            scorers.harness_error(str(exc))
            pytest.exit(f"harness error: {exc}", returncode=EXIT_HARNESS)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item):
        # Each process counts the checks it ran, from their final reports (xfail included): an xdist worker's reach
        # the controller in its payload.
        report = yield
        self.state.count_check(report)
        if report.when == "call" and "snapshot" in getattr(item, "fixturenames", ()):
            self.state.snapshot_ran = True
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        stopped = False
        try:
            return (yield)
        except BaseException:  # Ctrl-C, SIGTERM, pytest.exit
            stopped = True
            raise
        finally:
            self.role.tests_ended(session, stopped or bool(session.shouldfail or session.shouldstop))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # The cells the selected family tests will ask for, in their order (after -k, -m, --lf and the rest
        # deselected): on --executor ray they are scored as one stream from the first test on
        # (run.executors.ray_stream). pytest calls this hook even when collection stopped on an error (a bad input
        # file: there is no plan to make).
        state = self.state
        if state.usage_error is not None or session.config.option.collectonly:
            return
        if state.run.executor.streams and self.role.plans_at_collection():
            state.run.plan(planned_cells(session.items, state.run))
        self.role.collected(session)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.role.test_starts(item)  # an xdist worker plans a dataset's cells at its first test
        if item.get_closest_marker("gpu") is None:
            return
        state = self.state
        cluster = state.run.executor.cluster
        if cluster is not None:  # --executor ray: the actors' GPUs count, not this machine's
            if not cluster.resources().get("GPU"):
                pytest.skip(f"the Ray cluster at {state.settings.ray_address} has no GPU: gpu-marked tests need one")
            return
        if state.served and "robustness" in getattr(item, "fixturenames", ()):
            pytest.skip("a served model runs on its server's devices: its gate runs once, in the tests not marked gpu")
        import torch

        if not torch.cuda.is_available():
            pytest.skip(NO_CUDA)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        try:
            return (yield)
        except HarnessError as exc:
            if exc.stops_run:  # nothing more can be scored (an unreachable endpoint): stop after this test
                item.session.shouldfail = f"the run stopped: {exc}"
            pytest.fail(f"harness error (not a gate failure): {exc}", pytrace=False)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.role.finish(session, exitstatus)

    @pytest.hookimpl(trylast=True)  # the verdict is what a run ends on: after syrupy's and pytest-benchmark's
    def pytest_terminal_summary(self, terminalreporter) -> None:
        self.role.summary(terminalreporter)


def _is_gate_check(item: pytest.Item) -> bool:
    """A test that judges the gate: it uses the ``robustness`` fixture and is no benchmark (which measures only)."""
    names = getattr(item, "fixturenames", ())
    return "robustness" in names and "benchmark" not in names


def _judges_cells(item: pytest.Item) -> bool:
    """A gate check of cells: a family test, or the summary snapshot (every cell's numbers)."""
    family = hasattr(getattr(item, "function", None), FAMILY_ATTRIBUTE)
    return _is_gate_check(item) and (family or "snapshot" in getattr(item, "fixturenames", ()))


def _terminate_as_interrupt(config: pytest.Config) -> None:
    """SIGTERM (what a CI system sends to cancel a job) stops the run as Ctrl-C does: the tests stop, the journal
    keeps what was scored, the reports say the run is incomplete and the report folder's lock is released.
    Restored when pytest unconfigures."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt("terminated (SIGTERM): stopped as Ctrl-C stops a run")

    previous = signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))
