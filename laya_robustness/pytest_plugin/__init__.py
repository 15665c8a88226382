"""The pytest plugin of the robustness gate: thin hooks over the session, which holds the state and wires the run."""

from __future__ import annotations

import pytest

from laya_robustness.families import declared
from laya_robustness.pytest_plugin import options
from laya_robustness.pytest_plugin.estimate import show_time_left
from laya_robustness.pytest_plugin.gate_tests import FAMILY_ATTRIBUTE
from laya_robustness.pytest_plugin.gpus import assign_worker_gpu, worker_threads
from laya_robustness.pytest_plugin.selection import narrowed_by, planned_cells, selected_by
from laya_robustness.pytest_plugin.session import GPU_DEVICE, RUN_KEY, RobustnessSession
from laya_robustness.run.errors import EXIT_HARNESS, EXIT_USAGE, HarnessError, UsageError
from laya_robustness.run.judged import NO_CUDA, no_cell_judged
from laya_robustness.run.outcome import Ending, RunOutcome

SESSION_KEY = pytest.StashKey[RobustnessSession]()
MARKERS = {
    "gpu": "needs a CUDA device; skips with a reason where there is none",
    "invariance": "a repeat / batch invariance condition",
    "slow": "takes minutes rather than seconds",
    "orig": "the unperturbed rows",
    "baseline": "a comparison with the predictions of an earlier run (--baseline)",
}


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _dist_given(config: pytest.Config) -> bool:
    """Whether the user chose an xdist mode (--dist / -d / --distload) on the command line or in addopts."""
    import os
    import shlex

    words = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
             *config.getini("addopts")]
    return any(w in ("-d", "--distload", "--dist") or w.startswith("--dist=") for w in words)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    from laya_robustness.pytest_plugin.terminal import narrow_benchmark_table

    narrow_benchmark_table(config)  # before pytest-benchmark's pytest_configure (trylast) reads it
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    for family in declared():
        if family.name not in MARKERS:
            config.addinivalue_line("markers", f"{family.name}: the {family.name} family ({family.summary})")
    workers = config.getoption("numprocesses", default=None)
    if config.getoption("update_snapshots", default=False) and workers not in (None, 0, 1):
        raise pytest.UsageError("--snapshot-update cannot run under xdist (-n > 1): syrupy can truncate "
                                "snapshot files when workers write them; rerun with -n 0")
    if _is_worker(config):
        assign_worker_gpu(config.workerinput["workerid"])
        threads = worker_threads(int(config.workerinput.get("workercount", 1)))
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
    _terminate_as_interrupt(config)
    session = config.stash[SESSION_KEY] = RobustnessSession(config)
    if session.settings.keep_freed_memory:
        from laya_robustness.scoring.malloc import keep_freed_memory

        session.run.set_kept_freed_memory(keep_freed_memory())


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


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return []
    from laya_robustness.pytest_plugin.terminal import prefix_sharing_line

    if session.run.kept_freed_memory:
        lines = ["laya-robustness: malloc keeps freed memory for reuse, given back as images are let go (--keep-freed-memory yes)"]
    else:
        why = "--keep-freed-memory no" if not session.settings.keep_freed_memory else "the C library is not glibc"
        lines = [f"laya-robustness: malloc left as it is ({why})"]
    if session.served:
        lines.append(f"laya-robustness: {session.run.models.served_capability()}")
    if session.settings.limitations_note:
        lines.append(f"laya-robustness: {session.settings.limitations_note}")
    sharing = prefix_sharing_line(session.settings)
    return lines + ([sharing] if sharing else [])


def pytest_sessionstart(session: pytest.Session) -> None:
    # A served model's endpoint is reached once, before anything is collected: a dead one ends the run at once.
    state = session.config.stash.get(SESSION_KEY, None)
    if state is not None and state.served and not _is_worker(session.config):
        unreachable = state.run.models.endpoint_unreachable()
        if unreachable:
            pytest.exit(f"harness error (exit 3, not a gate failure): {unreachable}", returncode=EXIT_HARNESS)


def robustness_session(config: pytest.Config) -> RobustnessSession:
    return config.stash[SESSION_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # Drop the gate's state (records, rows, scorers and their caches: about a million objects on the
    # embedded default) before pytest's own unconfigure runs its garbage collections; freed here by
    # reference counting it costs a fraction of what the interpreter's shutdown would spend on it.
    if SESSION_KEY in config.stash:
        config.stash[SESSION_KEY].run.close()
        del config.stash[SESSION_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Only the gate's tests (those that use the ``robustness`` fixture) get the dataset and device axes.
    if "robustness" not in metafunc.fixturenames:
        return
    session = robustness_session(metafunc.config)
    if "dataset" in metafunc.fixturenames:
        metafunc.parametrize("dataset", session.datasets_for_collection())
    if "caption_set" in metafunc.fixturenames:
        sets = session.caption_sets_for_collection()
        if not sets:
            reason = session.run.models.no_dual_reason(metafunc.function.__name__.removeprefix("test_")) \
                or ("no caption rows to probe: select an lgip family and give a dual encoder (a CLIP / SigLIP "
                    "--model, or --dual-model)")
            sets = [pytest.param("none", marks=pytest.mark.skip(reason=reason))]
        metafunc.parametrize("caption_set", sets)
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", [pytest.param(session.default_device, id="cpu"),
                                        pytest.param(GPU_DEVICE, id="gpu", marks=pytest.mark.gpu)])


@pytest.hookimpl(tryfirst=True)  # before syrupy's: a usage error leaves it no collected test to count snapshots of
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # slow tests (the rotation sweep, the 256M benchmark) run only when -m names them
    if "slow" not in (config.option.markexpr or ""):
        skip = pytest.mark.skip(reason="slow: not in the default run; select it with -m slow (e.g. -m 'slow and not gpu')")
        for item in items:
            if item.get_closest_marker("slow") is not None:
                item.add_marker(skip)
    session = robustness_session(config)
    _benchmarks_when_asked(config, session, items)
    session.snapshot_tests = {i.nodeid for i in items if "snapshot" in getattr(i, "fixturenames", ())}
    session.check_ids = {i.nodeid for i in items if _is_gate_check(i)}
    session.cell_ids = {i.nodeid for i in items if _judges_cells(i)}
    gate_items = any("robustness" in getattr(i, "fixturenames", ()) for i in items)
    if session.usage_error is not None or gate_items:
        if not _inputs_valid(config, session, items):  # bad data or thresholds: a usage error before any test runs
            return
    if gate_items and not config.option.collectonly:
        _connect_cluster(session)  # an unreachable cluster stops the run before the report folder is touched
        _claim_report_dir(config, session, items)
    # The summary snapshot needs every family: run it after the family tests.
    items.sort(key=lambda item: "snapshot" in getattr(item, "fixturenames", ()))


def _benchmarks_when_asked(config: pytest.Config, session: RobustnessSession, items: list[pytest.Item]) -> None:
    """On one's own --data the gate's benchmarks (throughput, not a verdict) run only when asked: --benchmark-only
    (just them), --benchmark-enable (with the gate) or their file named on the command line."""
    asked = config.getoption("benchmark_only", False) or config.getoption("benchmark_enable", False) \
        or any("test_benchmarks" in str(arg) for arg in config.invocation_params.args)
    if asked or not session.run.models.own_data:
        return
    skip = pytest.mark.skip(reason="benchmarks run on your own --data when asked: --benchmark-only (just them) or "
                                   "--benchmark-enable (with the gate)")
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "benchmark" in names and "robustness" in names:
            item.add_marker(skip)


def _is_gate_check(item: pytest.Item) -> bool:
    """A test that judges the gate: it uses the ``robustness`` fixture and is no benchmark (which measures only)."""
    names = getattr(item, "fixturenames", ())
    return "robustness" in names and "benchmark" not in names


def _judges_cells(item: pytest.Item) -> bool:
    """A gate check of cells: a family test, or the summary snapshot (every cell's numbers)."""
    family = hasattr(getattr(item, "function", None), FAMILY_ATTRIBUTE)
    return _is_gate_check(item) and (family or "snapshot" in getattr(item, "fixturenames", ()))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    # Each process counts the checks it ran, from their final reports (xfail included): an xdist worker's reach
    # the controller in its payload.
    report = yield
    state = item.config.stash.get(SESSION_KEY, None)
    if state is not None:
        state.count_check(report)
        if report.when == "call" and "snapshot" in getattr(item, "fixturenames", ()):
            state.snapshot_ran = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    stopped = False
    try:
        return (yield)
    except BaseException:  # Ctrl-C, SIGTERM, pytest.exit
        stopped = True
        raise
    finally:
        state = session.config.stash.get(SESSION_KEY, None)
        if state is not None and not _is_worker(session.config):
            _syrupy_without_unused_advice(session, state, stopped or bool(session.shouldfail or session.shouldstop))


def _syrupy_without_unused_advice(session: pytest.Session, state: RobustnessSession, stopped: bool) -> None:
    """Leave syrupy out of the run's end where it would count the committed summary snapshot as unused and advise
    deleting it (deleting it under ``--snapshot-update``): a run that stopped before the snapshot's test ran, and
    an xdist run whose every snapshot test was compared here, on the controller (syrupy there sees the workers'
    skips, not the comparison). The terminal summary says what became of the snapshot."""
    deferred = {snapshot["nodeid"] for snapshot in state.deferred_snapshots}
    unrun = stopped and not state.snapshot_ran and not deferred
    compared_here = bool(deferred) and state.snapshot_tests <= deferred
    if not state.snapshot_tests or not (unrun or compared_here):
        return
    syrupy = session.config.pluginmanager.get_plugin("syrupy")
    if syrupy is not None:
        session.config.pluginmanager.unregister(syrupy)
    if unrun:
        state.snapshot_note = "the summary snapshot was not compared (the run stopped before its test)"


def pytest_collection_finish(session: pytest.Session) -> None:
    # The cells the selected family tests will ask for, in their order (after -k, -m, --lf and the rest deselected):
    # on --executor ray they are scored as one stream from the first test on (run.executors.ray_stream).
    # pytest calls this hook even when collection stopped on an error (a bad input file: there is no plan to make).
    state = session.config.stash.get(SESSION_KEY, None)
    if state is None or state.usage_error is not None or session.config.option.collectonly:
        return
    if state.run.models.run_executor.streams:
        state.run.plan(planned_cells(session.items, state.run))
    if not _is_worker(session.config):
        show_time_left(session.config, state, [i.nodeid for i in session.items],
                       skipped={i.nodeid for i in session.items if i.get_closest_marker("skip") is not None})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    # under xdist the controller knows the tests by their ids, from the first worker that collected them
    state = node.config.stash.get(SESSION_KEY, None)
    if state is not None and state.usage_error is None and not node.config.option.collectonly:
        show_time_left(node.config, state, list(ids), workers=int(node.config.getoption("numprocesses", 1) or 1))


def _inputs_valid(config: pytest.Config, session: RobustnessSession, items: list[pytest.Item]) -> bool:
    """Read the rows and limits (``RobustnessSession.validate_inputs``): a problem is pytest's usage error (exit 4).
    An xdist worker cannot raise one from its collection (xdist would report the worker as crashed): it runs none
    of its tests and tells the controller, which ends with exit 4 and the message."""
    try:
        session.validate_inputs()
        return True
    except pytest.UsageError as exc:
        if not _is_worker(config):
            raise
        _stop_worker(config, session, items, EXIT_USAGE, str(exc))
        return False


def _stop_worker(config: pytest.Config, session: RobustnessSession, items: list[pytest.Item], status: int,
                 message: str) -> None:
    """An xdist worker that cannot start the run: none of its tests run; the controller ends with ``status``."""
    session.start_error = (status, message)
    config.hook.pytest_deselected(items=list(items))
    items[:] = []


def _claim_report_dir(config: pytest.Config, session: RobustnessSession, items: list[pytest.Item]) -> None:
    """Hold --report-dir for this run before any test scores: another run there, or a folder that cannot be
    written, stops the run (exit 4, or 3 for a full disk) naming it. An xdist worker cannot stop the run from
    its collection: it runs none of its tests and tells the controller, which stops with that status."""
    try:
        session.claim_report_dir()
        return
    except UsageError as exc:
        status, message = EXIT_USAGE, str(options.as_pytest(exc))
    except HarnessError as exc:
        status, message = EXIT_HARNESS, str(exc)
    if not _is_worker(config):
        if status == EXIT_USAGE:
            raise pytest.UsageError(message)
        pytest.exit(message, returncode=status)
    _stop_worker(config, session, items, status, message)


def _connect_cluster(session: RobustnessSession) -> None:
    """--executor ray: connect before any test runs; an unreachable cluster ends the run at once (exit 3)."""
    try:
        session.run.models.connect_cluster()
    except HarnessError as exc:
        session.run.models.harness_error(str(exc))
        pytest.exit(f"harness error: {exc}", returncode=EXIT_HARNESS)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is None:
        return
    session = robustness_session(item.config)
    cluster = session.run.models.cluster
    if cluster is not None:  # --executor ray: the actors' GPUs count, not this machine's
        if not cluster.resources().get("GPU"):
            pytest.skip(f"the Ray cluster at {session.settings.ray_address} has no GPU: gpu-marked tests need one")
        return
    if robustness_session(item.config).served and "robustness" in getattr(item, "fixturenames", ()):
        pytest.skip("a served model runs on its server's devices: its gate runs once, in the tests not marked gpu")
    import torch

    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)


@pytest.fixture(scope="session")
def robustness(request: pytest.FixtureRequest) -> RobustnessSession:
    """The gate's session: rows, scorers, thresholds; scores each (family, dataset, device) once."""
    return robustness_session(request.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    except HarnessError as exc:
        if exc.stops_run:  # nothing more can be scored (an unreachable endpoint): stop after this test
            item.session.shouldfail = f"the run stopped: {exc}"
        pytest.fail(f"harness error (not a gate failure): {exc}", pytrace=False)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # -n alone: one worker per dataset (see pytest_plugin.xdist); an explicit --dist is the user's choice
    if config.getoption("dist", default="no") != "load" or _dist_given(config):
        return None
    from laya_robustness.pytest_plugin.xdist import DatasetScheduling

    return DatasetScheduling(config, log, robustness_session(config).datasets_for_collection())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    # the workers share the controller's run: its lock of --report-dir, its journal names
    node.workerinput[RUN_KEY] = robustness_session(node.config).run.run_identity.as_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    from laya_robustness.pytest_plugin.xdist import PAYLOAD_KEY, merge_payload

    payload = getattr(node, "workeroutput", {}).get(PAYLOAD_KEY)
    if payload:
        merge_payload(robustness_session(node.config), payload)


def ending(session: pytest.Session, exitstatus: int, nothing_judged) -> Ending:
    """How pytest's side of the run ended (``run.outcome.Ending``): its exit status, an exit status that ended the
    run before its tests did (interrupted, an internal error), a stop on purpose (``-x``, ``--maxfail``, a lost
    endpoint), the selection options that left cells out, and whether the run judged nothing."""
    ended = None
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        ended = f"the run ended with exit status {int(exitstatus)} ({pytest.ExitCode(exitstatus).name})"
    stopped = session.shouldstop or session.shouldfail or None
    state = robustness_session(session.config)
    narrowed = narrowed_by(session.config, state.run.families, bool(stopped))
    return Ending(status=int(session.exitstatus), ended=ended, stopped=stopped and str(stopped),
                  narrowed_by=tuple(narrowed), nothing_judged=nothing_judged)


def _compare_deferred_snapshots(session: pytest.Session, state: RobustnessSession) -> None:
    """xdist: the workers' snapshots against the merged records (before the reports, which then hold any
    cell the controller had to score); a difference fails the run."""
    from laya_robustness.pytest_plugin.snapshot import compare_deferred

    try:
        state.snapshot_outcomes = compare_deferred(state)
    except (HarnessError, OSError, ValueError) as exc:
        state.run.note_harness_error(f"comparing the summary snapshot on the controller: {type(exc).__name__}: "
                                     f"{exc}")
        return
    for outcome in state.snapshot_outcomes:
        if not outcome.matches and outcome.nodeid:
            _counted_as_failed(session.config, outcome.nodeid, f"summary snapshot ({outcome.device}) differs from "
                                                               f"{outcome.name}: see the terminal summary")
    if any(not o.matches for o in state.snapshot_outcomes) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _counted_as_failed(config: pytest.Config, nodeid: str, why: str) -> None:
    """The worker's snapshot test, skipped there to be compared here, counted as the failure it is (in the
    terminal's counts and its short summary), not as a skip."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    reporter.stats["skipped"] = [r for r in reporter.stats.get("skipped", []) if getattr(r, "nodeid", None) != nodeid]
    failed = pytest.TestReport(nodeid, (nodeid.split("::", 1)[0], None, nodeid), {}, "failed", why, "call")
    reporter.stats.setdefault("failed", []).append(failed)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = robustness_session(session.config)
    if _is_worker(session.config):
        from laya_robustness.pytest_plugin.xdist import PAYLOAD_KEY, worker_payload

        session.config.workeroutput[PAYLOAD_KEY] = worker_payload(state)
        return
    if state.start_error is not None:  # an xdist worker could not claim --report-dir: nothing ran
        session.exitstatus = state.start_error[0]
        return
    if state.deferred_snapshots and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        _compare_deferred_snapshots(session, state)
    compared = len(state.snapshot_outcomes)  # a snapshot compared on the controller judged the run's cells
    state.tally.judged, state.tally.cells = state.tally.judged + compared, state.tally.cells + compared
    selected = selected_by(session.config, bool(session.shouldstop or session.shouldfail))
    nothing = state.nothing_judged = _nothing_judged(session, state, selected)
    outcome = state.run.finish(ending(session, exitstatus, nothing))
    if selected:  # before this run's reports replace the earlier run's
        from laya_robustness.pytest_plugin.earlier import folded

        outcome = outcome.with_folded(folded(outcome, state.run.report_dir))
    if state.run.has_reports():
        outcome = _written(state, outcome)
    state.outcome = outcome
    if outcome.exit_status != outcome.caller_status:
        session.exitstatus = outcome.exit_status


def _nothing_judged(session: pytest.Session, state: RobustnessSession, selected: list[str]):
    """Why a run that would pass judged nothing (``run.judged``): every check it asked for skipped, or its test
    selection left out every cell the gate collected; None when it judged, or asked for the benchmarks alone."""
    if session.exitstatus != pytest.ExitCode.OK or session.config.getoption("benchmark_only", False) \
            or session.config.option.collectonly:  # a collection judges nothing, and claims nothing
        return None
    benchmarks = any("benchmark" in getattr(item, "fixturenames", ()) for item in session.items)
    return state.tally.nothing_judged() or (no_cell_judged(state.tally, selected, benchmarks)
                                            if state.cell_ids else None)


def _written(state: RobustnessSession, outcome: RunOutcome) -> RunOutcome:
    """The reports written, once the run is sure it still holds --report-dir (under xdist the controller claims
    it here)."""
    from laya_robustness.report.folder import written_to

    try:
        state.claim_report_dir()
    except (UsageError, HarnessError) as exc:
        return outcome.with_errors([f"the reports were not written: {exc}"])
    return written_to(outcome, state.run.report_dir)


@pytest.hookimpl(trylast=True)  # the verdict is what a run ends on: after syrupy's and pytest-benchmark's
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _is_worker(config):
        return
    from laya_robustness.pytest_plugin.terminal import write_summary

    write_summary(terminalreporter, robustness_session(config))
