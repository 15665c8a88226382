"""What narrowed a gate run, as its report names it: ``--families`` other than the default, the options that select
tests (``-k``, ``-m``, ``--lf``, ``--deselect``, ``--sw``, test ids), and ``-x`` / ``--maxfail`` when they stopped
it (``GateRun.scopes`` decides the report's scope from them); and which cells the selected tests will ask for."""

from __future__ import annotations

import pytest

from laya_robustness.pytest_plugin.gate_tests import FAMILY_ATTRIBUTE
from laya_robustness.pytest_plugin.pytest_options import default_of
from laya_robustness.run.gate_run import GateRun


def narrowed_by(config: pytest.Config, families: tuple[str, ...], stopped: bool) -> list[str]:
    """The options of this run that narrow what it covers (see the module doc), as given, in a fixed order."""
    out = []
    if tuple(families) != default_of("--families"):
        out.append(f"--families {','.join(families)}")
    return out + selected_by(config, stopped)


def selected_by(config: pytest.Config, stopped: bool) -> list[str]:
    """The test selection of this run that left some of its configuration's tests out (``narrowed_by`` less
    ``--families``, which chooses the configuration itself)."""
    option = config.option
    out = []
    if getattr(option, "keyword", ""):
        out.append(f"-k {option.keyword}")
    if getattr(option, "markexpr", ""):
        out.append(f"-m {option.markexpr}")
    if getattr(option, "lf", False):
        out.append("--lf")
    out += [f"--deselect {nodeid}" for nodeid in getattr(option, "deselect", None) or ()]
    if getattr(option, "stepwise", False) or getattr(option, "stepwise_skip", False):
        out.append("--sw")
    out += [f"test id {arg}" for arg in config.args if "::" in arg]
    maxfail = getattr(option, "maxfail", 0)
    if stopped and maxfail:
        out.append("-x" if maxfail == 1 else f"--maxfail {maxfail}")
    return out


def planned_cells(items, run: GateRun) -> list[tuple[str, str, str]]:
    """The (family, dataset, device) cells the family tests among ``items`` judge, in their order: those of a
    family the run scores (``run.run_cells``), not skipped by a mark. A session with no family test asks nothing of
    the run (its rows are not read)."""
    runnable, out = None, []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        family = getattr(getattr(item, "function", None), FAMILY_ATTRIBUTE, None)
        dataset = params.get("dataset", params.get("caption_set"))
        if family is None or dataset is None or "device" not in params:
            continue
        runnable = set(run.run_cells()) if runnable is None else runnable
        if item.get_closest_marker("skip") is None and (family, dataset) in runnable:
            out.append((family, dataset, params["device"]))
    return out
