"""What a run narrowed by test selection (``-k``, ``-m``, ``--lf``, ``--sw``, ``--deselect``, test ids) folds in: the
verdicts of the checks it did not judge, from the earlier run whose report is in ``--report-dir`` (its checks.json),
so that a retry or a narrowing never turns a failing gate into a pass (docs/options.md#narrowed-runs).

They are folded in only from a run of the same configuration: the same rows (data fingerprint), seed, rows per set,
families and scoring, and the same model, weights included (``report.compare.configuration_differences`` and the
weights' hashes), read from its summary.json's meta beside this run's. This run must have scored rows on the device
to tell its own configuration by. A check failed there and not judged again keeps this run's exit status at 1; what
was folded in, or why nothing was, is said on the terminal. The reports this run writes hold its own verdicts only.
"""

from __future__ import annotations

from pathlib import Path

from laya_robustness.report.cell_rows import FAIL, XPASS, as_result, check_status
from laya_robustness.report.read_back import CHECKS, SUMMARY, read_results, read_summary
from laya_robustness.report.compare import configuration_differences
from laya_robustness.run.outcome import Folded, RunOutcome

#: The model identity's keys that are its weights (``configuration_differences`` leaves them out).
WEIGHTS = ("weights_sha256", "dual")


def folded(outcome: RunOutcome, report_dir: Path) -> Folded:
    """The earlier verdicts this run folds in from ``report_dir`` (see the module doc), read before its own reports
    are written there; the first device it cannot fold for says why (``Folded.refused``)."""
    taken, failures = 0, []
    devices = {d: r for d, r in sorted(outcome.reports.items()) if r.summary is not None}
    if not devices and (Path(report_dir) / CHECKS).is_file():
        return Folded(str(report_dir), refused="this run scored no rows to tell its configuration by")
    for device, report in devices.items():
        folder = Path(report_dir) / report.folder
        if not (folder / CHECKS).is_file():
            continue  # no earlier run there: nothing to fold in, nothing to say
        try:
            earlier = _earlier_results(folder, report.summary["meta"])
        except (OSError, ValueError) as exc:
            return Folded(str(folder), refused=str(exc))
        judged = {_key(r) for r in outcome.results(device)}
        left = [r for r in earlier if r.get("device", device) == device and _key(r) not in judged]
        taken += len(left)
        failures += [f"{r['family']}/{r['dataset']} {r['check']}: {r.get('detail', '')}" for r in left if _fails(r)]
    return Folded(str(report_dir), taken, tuple(failures))


def _earlier_results(folder: Path, meta: dict) -> list[dict]:
    """The check results of the earlier run in ``folder``: ValueError when there is none, it is not the gate's, or
    its configuration is not ``meta``'s (naming what differs)."""
    if not (folder / SUMMARY).is_file():
        raise ValueError(f"{folder} holds the earlier run's {CHECKS} but not its {SUMMARY}")
    before = read_summary(folder / SUMMARY).get("meta") or {}
    differs = configuration_differences(before, meta) + [
        f"the model's {key} differs" for key in WEIGHTS
        if (before.get("model") or {}).get(key) != (meta.get("model") or {}).get(key)]
    if differs:
        raise ValueError(f"the run in {folder} is of another configuration ({'; '.join(differs)}; OLD: that run, "
                         "NEW: this one)")
    return read_results(folder / CHECKS)


def _key(result: dict) -> tuple[str, str, str]:
    return result["family"], result["dataset"], result["check"]


def _fails(result: dict) -> bool:
    """Whether an earlier check's result failed the gate: a failed check, or a known limitation that passed (XPASS)."""
    try:
        return check_status(as_result(result), "known" if result.get("known") else None) in (FAIL, XPASS)
    except (TypeError, ValueError):  # not a check result the gate wrote: count it failed, never passed
        return True
