"""The gate's per-process state in pytest, held by its plugin object (``gate.GatePlugin``): the run
(``laya_robustness.run.gate_run.GateRun``) the options describe, and what only pytest needs (a usage error kept until
collection ends, an xdist worker's start error, the snapshots compared on the controller).

``RobustnessSession`` is what the gate's tests receive as the ``robustness`` fixture: it asks the run to judge a
cell, a condition or a regression and turns the answer into the test's outcome (fail, xfail with the known
limitation, skip with its reason); bad input becomes pytest's usage error (exit 4).
"""

from __future__ import annotations

import pytest

from laya_robustness.pytest_plugin import outcomes
from laya_robustness.pytest_plugin.pytest_options import as_pytest, read_settings
from laya_robustness.pytest_plugin.progress import scoring_progress
from laya_robustness.run.errors import UsageError
from laya_robustness.run.gate_run import GateRun, Skipped, decided_nothing
from laya_robustness.run.judged import JudgedTally, NothingJudged
from laya_robustness.run.outcome import RunOutcome
from laya_robustness.run.outputs.lock import RunIdentity

GPU_DEVICE = "cuda"
#: The key of the controller's run identity in an xdist worker's ``workerinput``.
RUN_KEY = "laya_run"
#: The key of ``workerinput`` saying the worker is given whole datasets (``xdist.DatasetScheduling``).
DATASETS_KEY = "laya_whole_datasets"


def _skipping(check):
    """Run ``check``: a ``Skipped`` answer skips the test with its reason; a usage error is pytest's."""
    try:
        return check()
    except Skipped as exc:
        pytest.skip(str(exc))
    except UsageError as exc:
        raise as_pytest(exc) from None


class RobustnessSession:
    """One pytest process's part of a gate run (see the module doc)."""

    def __init__(self, config: pytest.Config, run: RunIdentity | None = None, worker: str | None = None):
        """``run``: an xdist worker's controller's run (else this process's); ``worker``: its xdist id."""
        self.config = config
        self.settings = read_settings(config)
        self.run = GateRun(self.settings, root=config.rootpath, worker=worker,
                           run=run if run is not None else RunIdentity.this_process(),
                           progress=lambda device, label, total: scoring_progress(config, device, label, total))
        self.usage_error: pytest.UsageError | None = None
        self.start_error: tuple[int, str] | None = None  # (exit status, why) when the run stopped before any work
        # under xdist: the workers' summary snapshots ({device, name, path}), compared on the controller
        self.deferred_snapshots: list[dict] = []
        self.snapshot_outcomes: list = []  # snapshot.SnapshotOutcome of each, once compared
        self.time_left = None  # estimate.TimeLeft of the run's tests, once they are known
        self.snapshot_tests: set[str] = set()  # the selected tests of syrupy's ``snapshot`` (any xdist worker's)
        self.snapshot_ran = False  # a summary snapshot test ran its call in this process
        self.snapshot_note: str | None = None  # why the snapshot was not compared, said at the end
        # the gate's checks this process ran (tests of the ``robustness`` fixture, benchmarks aside): judged or not
        self.check_ids: set[str] = set()
        self.cell_ids: set[str] = set()  # those of them that judge cells: the family tests and the summary snapshot
        self.tally = JudgedTally()
        self.nothing_judged: NothingJudged | None = None  # set when the run ends having judged no check
        self.outcome: RunOutcome | None = None  # what the run ended with (``GateRun.finish``), once it ended
        self._inapplicable = False  # the running check decided nothing: every limit not applicable

    # what the gate's tests (and a project's own) read by name
    seed = property(lambda self: self.settings.seed)
    families = property(lambda self: self.settings.families)
    default_device = property(lambda self: self.settings.device)
    report_dir = property(lambda self: self.settings.report_dir)
    served = property(lambda self: self.run.models.served)
    dual_model = property(lambda self: self.run.models.dual_model)
    rows = property(lambda self: _skipping(lambda: self.run.inputs.rows))
    datasets = property(lambda self: _skipping(lambda: self.run.inputs.datasets))
    caption_rows = property(lambda self: _skipping(lambda: self.run.inputs.caption_rows))
    thresholds = property(lambda self: _skipping(lambda: self.run.inputs.thresholds))

    def scorer(self, device: str, source: str = "rows"):
        """The model scoring ``source`` rows on ``device`` in this process, loaded once."""
        return self.run.scorers.scorer(device, source)

    def full_summary(self, device: str) -> dict:
        """The summary of every cell the run asks for on ``device`` (scoring what is missing)."""
        return _skipping(lambda: self.run.full_summary(device))

    # -- checks -------------------------------------------------------------------------------------

    def check_family(self, family: str, dataset: str, device: str) -> None:
        """Evaluate every limit of (family, dataset); fail, xfail (known limitation), skip or pass."""
        check = _skipping(lambda: self.run.check_family(family, dataset, device))
        self._inapplicable = decided_nothing(check)
        outcomes.cell_outcome(check.verdict, check.records, family, dataset, check.limits_files)

    def check_invariance(self, condition: str, device: str, source: str = "rows") -> None:
        """Evaluate the condition's limits (a bf16 condition gets the ``[invariance.bf16]`` flip budget)."""
        check = _skipping(lambda: self.run.check_invariance(condition, device, source))
        self._inapplicable = decided_nothing(check)
        outcomes.invariance_outcome(check.results, check.stats)

    def check_regression(self, family: str, device: str) -> None:
        """The family, over all its datasets, against the --baseline: its regression limits and the McNemar tests."""
        check = _skipping(lambda: self.run.check_regression(family, device))
        outcomes.regression_outcome(check.results, check.cell)

    def count_check(self, report) -> None:
        """Count a gate check's test in ``tally`` from its setup and call reports (``pytest_runtest_logreport``):
        judged when it passed, failed or xfailed; skipped with its reason; not applicable when its check said so."""
        if report.nodeid not in self.check_ids or report.when == "teardown":
            return
        inapplicable, self._inapplicable = self._inapplicable, False
        if report.when == "setup" and report.passed:
            return
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.tally.asked_for(skipped=reason.removeprefix("Skipped: "), not_applicable=inapplicable)
        else:  # passed, failed, xfailed or xpassed in its call; an error in its setup judged nothing
            self.tally.asked_for(judged=report.when == "call", cell=report.nodeid in self.cell_ids)

    def defer_snapshot(self, device: str, name: str, path, nodeid: str | None = None) -> None:
        """A worker's summary snapshot (of the test ``nodeid``), to be compared on the controller once every
        worker's records are in."""
        self.deferred_snapshots.append({"device": device, "name": name, "path": str(path), "nodeid": nodeid})

    # -- collection ---------------------------------------------------------------------------------

    def _kept(self, read) -> list[str]:
        """Names to parametrise over; a bad input file is kept and raised after collection."""
        try:
            return list(read())
        except UsageError as exc:
            self.usage_error = as_pytest(exc)
            return []

    def datasets_for_collection(self) -> list[str]:
        return self._kept(lambda: self.run.inputs.datasets)

    def caption_sets_for_collection(self) -> list[str]:
        return self._kept(lambda: self.run.inputs.caption_rows)

    def validate_inputs(self) -> None:
        """Load rows and limits now; their errors are usage errors (exit 4), not test failures."""
        if self.usage_error is None:
            try:
                self.run.validate_inputs()
            except UsageError as exc:
                self.usage_error = as_pytest(exc)
        if self.usage_error is not None:
            raise self.usage_error

    def claim_report_dir(self) -> None:
        """Hold --report-dir for this run (``GateRun.claim_report_dir``), saying so on the terminal while it waits
        for another run to end. Raises ``UsageError`` or ``HarnessError``."""
        def say_waiting(holder) -> None:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                who = holder.describe() if holder else "a run whose lock cannot be read"
                reporter.write_line(f"laya-robustness: {self.report_dir} is in use by another run ({who}); waiting "
                                    f"up to {self.settings.report_dir_wait} s for it to end")

        self.run.claim_report_dir(on_wait=say_waiting)

    @property
    def reported(self) -> bool:
        """Whether the run has anything to report (records or invariance stats, its xdist workers' included)."""
        return self.run.has_reports()

