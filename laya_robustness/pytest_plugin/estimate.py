"""What a gate run will do and the time it has left, shown before its tests and beside pytest's own progress.

Before the tests, one line: the rows, datasets and families the run will score and its gate tests by kind. While
they run, the time left follows pytest's percentage (``[ 43%] ~1:12 left``), so the progress stays pytest's one
line per test file at default verbosity. The time left is learned from the run itself, once a family test is done:

- a family test scores its dataset's rows' variants, so it is expected to take its family's seconds per row so far
  (else the run's, over every family test done) times its dataset's rows;
- any other test (an invariance condition, a benchmark, the snapshot) the mean duration of the finished tests of
  its module, else of every finished test;
- left = the sum over the tests not finished, divided by the processes running them (xdist's workers).

The first family test done leaves the rates once another is done: it also loaded the model and warmed it up.

A test that cannot run here (a gpu test without CUDA) is not counted.

>>> left = TimeLeft([Planned("m::test_shift[a-cpu]", "m", "shift", 10), Planned("m::test_shift[b-cpu]", "m",
...                  "shift", 30), Planned("i::test_invariance[cpu-x]", "i", None, 0)])
>>> left.seconds_left() is None
True
>>> left.finished("m::test_shift[a-cpu]", 5.0)
>>> left.seconds_left()  # 30 rows at 0.5 s a row, and the invariance test at the mean of the tests done
20.0
>>> short_duration(20.0), short_duration(125.0), short_duration(4000.0)
('~20 s', '~2:05', '~1 h 06')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

#: The widest suffix written after pytest's percentage; pytest's dot lines wrap that much earlier.
SUFFIX_WIDTH = len(" ~99 h 59 left")


@dataclass(frozen=True)
class Planned:
    """One test of the run: its node id, its module, the family it checks (None for any other test) and the
    source rows that family scores for it."""

    nodeid: str
    module: str
    family: str | None
    rows: int


class TimeLeft:
    """The seconds a run has left, from the durations of its finished tests (see the module doc)."""

    def __init__(self, tests: Iterable[Planned], workers: int = 1):
        self.tests = {t.nodeid: t for t in tests}
        self.workers = max(1, workers)
        self.done: dict[str, float] = {}
        self._spent: dict[str, float] = {}  # the phases so far of the tests running

    def finished(self, nodeid: str, seconds: float) -> None:
        """A test ran to its end in ``seconds`` (its setup, call and teardown)."""
        if nodeid in self.tests:
            self.done[nodeid] = seconds

    def skipped(self, nodeid: str) -> None:
        """A test was skipped: it is no work, and no measure of any."""
        self.tests.pop(nodeid, None)
        self.done.pop(nodeid, None)

    def follow(self, report) -> None:
        """Take one of pytest's test reports (``pytest_runtest_logreport``): a test's phases are summed, and it is
        finished with its teardown; one skipped in its setup leaves the count."""
        if report.nodeid not in self.tests:
            return
        if report.when == "setup" and report.skipped:
            self.skipped(report.nodeid)
            return
        self._spent[report.nodeid] = self._spent.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            self.finished(report.nodeid, self._spent.pop(report.nodeid))

    def _rates(self) -> tuple[dict[str, float], float | None]:
        """Seconds per row of each family done, and of every family test done; once a second is done, without the
        first (it also loaded the model and warmed it up)."""
        seconds: dict[str, float] = {}
        rows: dict[str, int] = {}
        done = [nodeid for nodeid in self.done if self.tests[nodeid].family is not None and self.tests[nodeid].rows]
        for nodeid in done[1:] if len(done) > 1 else done:
            spent, test = self.done[nodeid], self.tests[nodeid]
            seconds[test.family] = seconds.get(test.family, 0.0) + spent
            rows[test.family] = rows.get(test.family, 0) + test.rows
        overall = sum(seconds.values()) / sum(rows.values()) if rows else None
        return {f: seconds[f] / rows[f] for f in rows}, overall

    def seconds_left(self) -> float | None:
        """The expected seconds of the tests not finished, over the workers; None before a family test is done."""
        by_family, overall = self._rates()
        if overall is None:
            return None
        durations = list(self.done.values())
        by_module: dict[str, list[float]] = {}
        for nodeid, spent in self.done.items():
            by_module.setdefault(self.tests[nodeid].module, []).append(spent)
        total = 0.0
        for nodeid, test in self.tests.items():
            if nodeid in self.done:
                continue
            if test.family is not None:
                total += by_family.get(test.family, overall) * test.rows
            else:
                same = by_module.get(test.module) or durations
                total += sum(same) / len(same)
        return total / self.workers


def short_duration(seconds: float) -> str:
    """``~20 s``, ``~2:05`` (minutes:seconds), ``~1 h 07``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"~{seconds} s"
    if seconds < 3600:
        return f"~{seconds // 60}:{seconds % 60:02d}"
    return f"~{seconds // 3600} h {seconds % 3600 // 60:02d}"


def planned_tests(nodeids: Iterable[str], family_of: Callable[[str], str | None],
                  rows_of: Callable[[str, str], int], datasets: Iterable[str],
                  runs_here: Callable[[str], bool]) -> list[Planned]:
    """The tests to count: ``family_of(test function name)`` names a family test's family, ``rows_of(family,
    dataset)`` its rows; ``runs_here(nodeid)`` leaves out what is skipped here."""
    from laya_robustness.pytest_plugin.xdist import dataset_scope

    known = list(datasets)
    out = []
    for nodeid in nodeids:
        if not runs_here(nodeid):
            continue
        module, _, name = nodeid.partition("::")
        family = family_of(name.partition("[")[0])
        scope = dataset_scope(nodeid, known)
        dataset = scope.removeprefix("dataset:") if scope.startswith("dataset:") else None
        if family is not None and dataset is not None:
            out.append(Planned(nodeid, module, family, rows_of(family, dataset)))
        else:
            out.append(Planned(nodeid, module, None, 0))
    return out


def plan_line(device: str, rows: Mapping[str, int], tests: list[Planned]) -> str:
    """The one line said before the tests: what the run will score and its tests by kind.

    >>> plan_line("cpu", {"a": 10, "b": 30}, [Planned("f::test_shift[a-cpu]", "f", "shift", 10),
    ...            Planned("i::test_invariance[cpu-x]", "i", None, 0)])
    'laya-robustness plan (cpu): 40 rows of 2 datasets; 1 family test of 1 family, 1 other test; the time left follows the progress'
    """
    families = {t.family for t in tests if t.family is not None}
    family_tests = sum(t.family is not None for t in tests)
    others = len(tests) - family_tests
    return (f"laya-robustness plan ({device}): {sum(rows.values()):,} rows of {len(rows)} dataset"
            f"{'s' * (len(rows) != 1)}; {family_tests:,} family test{'s' * (family_tests != 1)} of {len(families)} "
            f"famil{'ies' if len(families) != 1 else 'y'}, {others:,} other test{'s' * (others != 1)}; the time left "
            "follows the progress")


def _runs_here(skipped: set[str]) -> Callable[[str], bool]:
    """Whether a test runs here: not marked to skip, and not a gpu test on a machine without CUDA."""
    cuda = None

    def runs(nodeid: str) -> bool:
        nonlocal cuda
        if nodeid in skipped:
            return False
        if nodeid.endswith(("-gpu]", "[gpu]")) or "-gpu-" in nodeid:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            return cuda
        return True

    return runs


def _family_of(name: str) -> str | None:
    from laya_robustness.families import find_family

    family = find_family(name.removeprefix("test_")) if name.startswith("test_") else None
    return None if family is None else family.name


def show_time_left(config, state, nodeids: list[str], skipped: set[str] = frozenset(), workers: int = 1) -> None:
    """Say the plan line and follow pytest's percentage with the time left (``state``: the run's session)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or state.time_left is not None:
        return
    try:
        inputs = state.run.inputs
        rows = {name: len(rows) for source in (inputs.rows, inputs.caption_rows) for name, rows in source.items()}
        datasets = list(rows)
    except Exception:  # unreadable inputs are reported as usage errors elsewhere
        return

    def rows_of(family: str, dataset: str) -> int:
        return len(state.run.rows_of(family).get(dataset, ()))

    planned = planned_tests(nodeids, _family_of, rows_of, datasets, _runs_here(set(skipped)))
    # a family test of a family not asked for, or one these models cannot take, skips at once: no work
    runs = {family: family in {"orig", *state.settings.families} and state.run.models.skip_reason(family) is None
            for family in {t.family for t in planned if t.family is not None}}
    tests = [t for t in planned if t.family is None or runs[t.family]]
    if not any(t.family for t in tests):
        return
    state.time_left = TimeLeft(tests, workers)
    from laya_robustness.pytest_plugin.terminal import write_wrapped

    write_wrapped(reporter, plan_line(state.settings.device, rows, tests))
    config.pluginmanager.register(_ReportFollower(state.time_left), "laya-robustness-time-left")
    _follow_progress(reporter, state.time_left)


class _ReportFollower:
    """The pytest plugin that hands each test report (a worker's too, on the xdist controller) to the estimate."""

    def __init__(self, time_left: TimeLeft):
        self.time_left = time_left

    def pytest_runtest_logreport(self, report) -> None:
        self.time_left.follow(report)


def _follow_progress(reporter, time_left: TimeLeft) -> None:
    """pytest's progress message (``[ 43%]``) followed by the time left; its dot lines wrap earlier by as much.
    Where pytest's terminal has no such message (another pytest), only the plan line is said."""
    original = getattr(reporter, "_get_progress_information_message", None)
    if original is None or not isinstance(getattr(reporter, "_screen_width", None), int):
        return
    reporter._screen_width -= SUFFIX_WIDTH

    def with_time_left() -> str:
        text = original()
        left = time_left.seconds_left()
        if left is None or len(time_left.done) >= len(time_left.tests) or not text.strip():
            return text
        return f"{text} {short_duration(left)} left"

    reporter._get_progress_information_message = with_time_left
