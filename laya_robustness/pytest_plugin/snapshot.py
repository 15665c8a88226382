"""The summary snapshot: its name (the configuration the user chose) and its content, sized for review (one line
per family and dataset: each headline number at 3 decimals with its 95% interval; the fingerprints of the weights
and the rows they were made from), and what moved when it differs.

One snapshot per configuration: ``<model>.<cpu|gpu|mps>.<data>.s<seed>.n<rows per set>.<families>``, ``--model``
and ``--data`` as given, then ``.<scoring>`` where the scoring differs from the device's default: another scorer
(a served model: ``openai``), the predict path, a batch-path precision other than the device's (``fp32`` on
CUDA, ``bf16`` elsewhere), another batch size (``b8``), another attention implementation (``sdpa``), joined by
``-``. Each of these moves logits in their last digits (the predict path's fp32 logits differ from the batch
path's by up to 1e-4 on the embedded default), so each keeps its own numbers. The weights and the rows are not in
the name but in the snapshot (``fingerprints``): a new checkpoint at the same ``--model``, or new rows at the same
``--data``, is compared with the committed snapshot and fails with what moved (``snapshot_changes``: the
fingerprints, then each headline number with whether its move lies beyond its interval), and
``--snapshot-update`` rewrites the same file, so the pull request shows one changed line per cell that moved
(summary.json, a report, keeps every number). A configuration without a snapshot (another model or data path,
another scoring) has nothing to be compared with: its test says so and how to record one.

Under xdist no worker has every record, so a worker's snapshot test only names the snapshot
(``defer_snapshot``) and skips; the controller compares it once the workers' records are merged
(``compare_deferred``: the same serialisation syrupy compares), prints the outcome in the terminal
summary and fails the run's exit status when it differs.

syrupy holds the snapshot files (``SummarySnapshotExtension``), but no run can tell another configuration's snapshot
unused: each run compares only its own. So the extension discovers none, and syrupy never counts another
configuration's committed snapshot unused, fails a passing run over it or deletes it under ``--snapshot-update``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from syrupy.data import SnapshotCollections
from syrupy.extensions.json import JSONSnapshotExtension

from laya_robustness.pytest_plugin.pytest_options import default_of
from laya_robustness.report.compare import half_widths
from laya_robustness.run.errors import HarnessError
from laya_robustness.run.files import file_safe
from laya_robustness.run.inputs.fingerprints import data_fingerprint, families_label, model_fingerprint
from laya_robustness.run.pipeline.scorer_sources import identity_key
from laya_robustness.scoring.base import batch_precision
from laya_robustness.summary import headlines

DIFF_LINES = 60
#: The precision a reviewer reads a headline at (the reports' 3 decimals); summary.json keeps every digit.
REVIEW_DIGITS = 3
_HEADLINE = re.compile(r"^(\S+) (\S+)(?: \[(\S+), (\S+)\])?$")
#: Why a worker's snapshot test skips under xdist.
COMPARED_ON_CONTROLLER = ("under xdist the summary snapshot is compared once, on the controller, over every worker's "
                          "records merged: see 'summary snapshot' in the terminal summary (a difference fails the run)")


@dataclass(frozen=True)
class SnapshotOutcome:
    """One comparison: which snapshot, whether it matched, and when it did not a unified diff and what moved."""

    device: str
    name: str
    matches: bool
    diff: str = ""
    changes: tuple[str, ...] = ()  # what moved (``snapshot_changes``)
    where: str = "compared on the controller"
    nodeid: str | None = None  # the worker's snapshot test, when compared on the controller


def device_kind(device: str) -> str:
    """``gpu`` for a CUDA device, ``mps`` for Apple's, else ``cpu``: devices whose kernels round alike."""
    return "gpu" if device.startswith("cuda") else "mps" if device.startswith("mps") else "cpu"


def scoring_label(settings, device: str) -> str:
    """What the run's scoring settings change from the device's default scoring, as a name suffix (see the
    module doc): "" for the default, e.g. ``.predict`` or ``.fp32-b8``."""
    parts = []
    scorer = getattr(settings, "scorer", default_of("--scorer"))
    if scorer != default_of("--scorer"):
        parts.append(scorer)
    if settings.scoring_path != default_of("--scoring-path"):
        parts.append(settings.scoring_path)  # fp32 whatever --precision says
    elif batch_precision(settings.precision, device) != batch_precision(default_of("--precision"), device):
        parts.append(batch_precision(settings.precision, device))
    if settings.batch_size != default_of("--batch-size"):
        parts.append(f"b{settings.batch_size}")
    if settings.attn_implementation != default_of("--attn-implementation"):
        parts.append(settings.attn_implementation)
    return "." + file_safe("-".join(parts)) if parts else ""


def as_given(path: Path, root: Path) -> str:
    """``path`` as the user gave it: relative to the project root when it lies under it (the embedded default's
    ``laya_fixtures/rows``), else as it is."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def snapshot_name(session, device: str) -> str:
    """The name of the run configuration's snapshot (see the module doc)."""
    run, s = session.run, session.settings
    model = file_safe(run.model_name.strip("/"))
    data = file_safe(as_given(s.data, run.root).strip("/"))
    return (f"{model}.{device_kind(device)}.{data}.s{s.seed}.n{s.rows_per_set}.{families_label(s.families)}"
            f"{scoring_label(s, device)}")


def fingerprints(session, device: str) -> dict[str, str]:
    """Short fingerprints of the weights (the question model's and the dual encoder's) and of the rows."""
    run = session.run
    identity = {}
    if not run.models.is_dual:
        identity = run.scorers.identity(device)  # the identity (weight hashes) comes from the loaded scorer
    if run.inputs.caption_rows:
        identity["dual"] = run.scorers.identity(device, "captions")
    return {"weights": model_fingerprint(identity, run.model_name, session.settings.scorer),
            "rows": data_fingerprint({**run.inputs.rows, **run.inputs.caption_rows})}


def _number(value: float) -> str:
    return f"{round(value, REVIEW_DIGITS) + 0.0:.{REVIEW_DIGITS}f}"


def cell_lines(summary: dict) -> dict[str, str]:
    """One line per (family, dataset) cell: each headline number at review precision with its 95% interval,
    ``acc 0.750 [0.612, 0.861]; flip 0.125 [0.050, 0.200]`` (``summary.headlines``, in their declared order)."""
    cells: dict[str, list[str]] = {}
    for (family, dataset, metric), (value, interval) in headlines(summary).items():
        text = f"{metric} {_number(value)}"
        if interval:
            text += f" [{_number(interval[0])}, {_number(interval[1])}]"
        cells.setdefault(f"{family}/{dataset}", []).append(text)
    return {cell: "; ".join(parts) for cell, parts in cells.items()}


def cell_headlines(cells: dict[str, str]) -> dict[tuple[str, str, str], tuple[float, list | None]]:
    """``cell_lines`` read back: ``(family, dataset, metric) -> (value, interval or None)``."""
    out = {}
    for cell, line in cells.items():
        family, _, dataset = cell.partition("/")
        for part in line.split("; "):
            match = _HEADLINE.match(part)
            if match is None:
                continue
            metric, value, low, high = match.groups()
            out[(family, dataset, metric)] = (float(value), [float(low), float(high)] if low is not None else None)
    return out


def snapshot_view(session, device: str) -> dict:
    """What the snapshot holds, sized for review: the run's identity, the fingerprints of its weights and rows, its
    seed, rows per set and temperatures, and one line per (family, dataset) cell under ``headlines``
    (``cell_lines``; the keys sort so that the fingerprints come first). Every other number stays in summary.json,
    a report."""
    run = session.run
    summary = session.full_summary(device)
    identity = dict(run.identities.get(device, {}))
    identity.pop("model", None)
    # how prompt prefixes are shared moves logits within float rounding only (shared_prefix_vs_alone holds it)
    identity.pop("prefix_sharing", None)
    dual = dict(run.identities.get(identity_key(device, "captions"), {}))
    if dual:
        identity["dual"] = {k: v for k, v in dual.items() if k != "model"}
    s = session.settings
    return {"model": run.model_name, "identity": identity, "fingerprints": fingerprints(session, device),
            "seed": s.seed, "rows_per_set": s.rows_per_set, "temperatures": s.temperatures,
            "headlines": cell_lines(summary)}


def _headlines_of(view: dict) -> dict:
    """The headlines of a snapshot: its cell lines read back, or (a snapshot of the earlier format, which held the
    whole summary) ``summary.headlines`` of it."""
    return cell_headlines(view["headlines"]) if "headlines" in view else headlines(view)


def snapshot_changes(stored: dict, actual: dict) -> list[str]:
    """What moved from the ``stored`` snapshot to this run's (both as ``snapshot_view`` makes them): the changed
    fingerprints first, then each headline that moved at review precision, old -> new: a cell that is new or gone,
    then those beyond the stored value's 95% interval (beyond noise), then those within it, each group furthest
    first in units of the interval's half-width (``|new - old| / ((high - low) / 2)``), then those without one."""
    lines = []
    before, after = stored.get("fingerprints") or {}, actual.get("fingerprints") or {}
    for key, what in (("weights", "the weights"), ("rows", "the rows")):
        if before.get(key) != after.get(key):
            lines.append(f"{what}: fingerprint {before.get(key)} -> {after.get(key)}")
    old, new = _headlines_of(stored), _headlines_of(actual)
    moved = []
    for cell in set(old) | set(new):
        name = f"{cell[0]}/{cell[1]} {cell[2]}"
        if cell not in old or cell not in new:
            moved.append(((0, -math.inf, name), f"{name}: {'new' if cell in new else 'gone'}"))
            continue
        (was, interval), (now, _) = old[cell], new[cell]
        if _number(was) == _number(now):
            continue
        change = f"{name}: {_number(was)} -> {_number(now)}"
        if not interval:
            moved.append(((3, 0.0, name), f"{change} (no interval)"))
            continue
        low, high = interval
        units = half_widths(was, now, interval)
        beyond = not low <= now <= high
        where = f"{'BEYOND' if beyond else 'within'} its 95% interval [{_number(low)}, {_number(high)}]"
        moved.append(((1 if beyond else 2, -units, name), f"{change} ({where}, {units:.1f} half-widths)"))
    return lines + [line for _, line in sorted(moved)]


class SummarySnapshotExtension(JSONSnapshotExtension):
    """syrupy's JSON snapshot, one file per run configuration, that discovers no snapshot (see the module doc):
    syrupy's unused-snapshot accounting sees only the file this run compares or writes."""

    def discover_snapshots(self, **where) -> SnapshotCollections:
        return SnapshotCollections()


def summary_snapshot(request):
    """The running test's syrupy assertion of the summary snapshot, made with ``SummarySnapshotExtension`` alone:
    syrupy's own ``snapshot`` fixture would also register its default extension, whose discovery counts every
    other configuration's file in ``__snapshots__`` as an unknown, unused one."""
    from syrupy.assertion import SnapshotAssertion
    from syrupy.location import PyTestLocation

    option = request.config.option
    values = {"update_snapshots": option.update_snapshots, "extension_class": SummarySnapshotExtension,
              "test_location": PyTestLocation(request.node), "session": request.config._syrupy}
    if hasattr(option, "update_new_snapshots_only"):  # a newer syrupy's option
        values["update_new_snapshots_only"] = option.update_new_snapshots_only
    return SnapshotAssertion(**values)


def serialized(view: dict) -> str:
    """A snapshot view serialised exactly as the snapshot file holds it (syrupy's JSON extension)."""
    return SummarySnapshotExtension().serialize(view)


def serialized_view(session, device: str) -> str:
    """``snapshot_view`` serialised exactly as the snapshot file holds it."""
    return serialized(snapshot_view(session, device))


def compare_deferred(session) -> list[SnapshotOutcome]:
    """Compare each snapshot the workers deferred with the summary of the merged records (scoring only
    cells no worker scored)."""
    out = []
    for item in session.deferred_snapshots:
        stored = Path(item["path"]).read_text(encoding="utf-8")
        actual = serialized_view(session, item["device"])
        diff = "" if actual == stored else "".join(list(difflib.unified_diff(
            stored.splitlines(keepends=True), actual.splitlines(keepends=True), "snapshot", "this run", n=1))[:DIFF_LINES])
        changes = () if actual == stored else tuple(snapshot_changes(json.loads(stored), json.loads(actual)))
        out.append(SnapshotOutcome(item["device"], item["name"], actual == stored, diff, changes,
                                   nodeid=item.get("nodeid")))
    return out


#: xdist's options (syrupy cannot update snapshots under workers), with whether each takes a value.
XDIST_FLAGS = {"-n": True, "--numprocesses": True, "--dist": True, "-d": False, "--maxprocesses": True}


def accept_command(config) -> str:
    """The command that records this run's snapshot: the run's own arguments (its model, data, families and every
    other option name the snapshot), without xdist, with ``--snapshot-update`` and, where xdist is installed,
    ``-n 0`` (an ``-n`` in addopts would otherwise refuse the update).

    >>> class Config:
    ...     class invocation_params:
    ...         args = ("robustness_tests", "-n", "2", "--model", "my model", "--dist=load", "-k", "text")
    ...     class pluginmanager:
    ...         hasplugin = staticmethod(lambda name: name == "xdist")
    >>> accept_command(Config)
    "pytest robustness_tests --model 'my model' -k text --snapshot-update -n 0"
    """
    import shlex

    words, kept = list(config.invocation_params.args), []
    while words:
        word = words.pop(0)
        flag = word.split("=", 1)[0]
        if word == "--snapshot-update":
            continue
        if flag in XDIST_FLAGS or (word.startswith("-n") and word[2:].isdigit()):
            if XDIST_FLAGS.get(flag) and "=" not in word and words:
                words.pop(0)
            continue
        kept.append(word)
    serial = ["-n", "0"] if config.pluginmanager.hasplugin("xdist") else []
    return shlex.join(["pytest", *kept, "--snapshot-update", *serial])


# -- the snapshot in the run's pytest session -------------------------------------------------------------------


def leave_syrupy_out(session, state, stopped: bool) -> None:
    """Leave syrupy out of the run's end where it would count the committed summary snapshot as unused and advise
    deleting it (deleting it under ``--snapshot-update``): a run that stopped before the snapshot's test ran, and
    an xdist run whose every snapshot test was compared here, on the controller (syrupy there sees the workers'
    skips, not the comparison). The terminal summary says what became of the snapshot (``state``: the run's
    session)."""
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


def compare_on_controller(session, state) -> None:
    """xdist: the workers' snapshots against the merged records (before the reports, which then hold any
    cell the controller had to score); a difference fails the run."""
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


def _counted_as_failed(config, nodeid: str, why: str) -> None:
    """The worker's snapshot test, skipped there to be compared here, counted as the failure it is (in the
    terminal's counts and its short summary), not as a skip."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    reporter.stats["skipped"] = [r for r in reporter.stats.get("skipped", []) if getattr(r, "nodeid", None) != nodeid]
    failed = pytest.TestReport(nodeid, (nodeid.split("::", 1)[0], None, nodeid), {}, "failed", why, "call")
    reporter.stats.setdefault("failed", []).append(failed)
