"""When a gated training run stops (``RobustnessCallback(stop_on_fail=...)``): the policies, and the decision of one
evaluation given what failed at it and at the evaluation before.

- ``False`` (the default): never; the failures are logged and reported.
- ``True`` or ``"failure"``: at the first evaluation where any check fails (or nothing is judged, or the gate itself
  breaks).
- ``"confirmed"``: at an evaluation where a check fails that also failed at the evaluation before (the same family,
  dataset and check; the gate breaking, or judging nothing, twice in a row counts too): one evaluation's failure
  that the next one does not repeat is logged, not stopped on.
- ``"regression"``: only when a ``baseline`` regression check fails (``max_regression``, ``max_flip_regression``:
  the model lost accuracy, or flips more, than the last release on the same rows), or the gate breaks; a check
  that the baseline fails too does not stop the run.

The callback draws the rows and variants once and reuses them, so an unchanged model gets the same verdict at every
evaluation: its chance of a stop does not grow with the number of evaluations (docs/training.md).

>>> decide("confirmed", {"text/a max_flip"}, set())
False
>>> decide("confirmed", {"text/a max_flip"}, {"text/a max_flip", "x/b min_acc"})
True
>>> decide("regression", {"text/a max_flip"}, set()), decide("regression", {"text/all max_regression"}, set())
(False, True)
"""

from __future__ import annotations

from typing import Collection

from laya_robustness.run.errors import UsageError

POLICIES = (False, True, "failure", "confirmed", "regression")
#: The checks of a ``baseline`` comparison whose failure means the model regressed.
REGRESSION_CHECKS = ("max_regression", "max_flip_regression")
#: What an evaluation whose gate broke, or that judged nothing, counts as failing.
GATE_BROKE, NOTHING_JUDGED = "the gate itself", "nothing judged"


def check_policy(policy, baseline) -> object:
    """``policy`` when it is one of ``POLICIES`` (``"regression"`` needs a ``baseline``); else a ``UsageError`` naming
    ``stop_on_fail``."""
    if policy not in POLICIES or isinstance(policy, (int, float)) and not isinstance(policy, bool):
        raise UsageError(f"stop_on_fail: {policy!r} is not one of False, True, 'failure', 'confirmed', 'regression'")
    if policy == "regression" and baseline is None:
        raise UsageError("stop_on_fail: 'regression' stops on a regression against a baseline, and no baseline is "
                         "given", hint="pass baseline=<the last release's predictions.jsonl.gz>, or "
                         "stop_on_fail='confirmed'")
    return policy


def failed_key(family: str, dataset: str, check: str) -> str:
    """How a failed check is named in a decision (and in the warning): ``<family>/<dataset> <check>``."""
    return f"{family}/{dataset} {check}"


def decide(policy, failed: Collection[str], before: Collection[str]) -> bool:
    """Whether to stop at an evaluation where ``failed`` failed (``failed_key``, ``GATE_BROKE``, ``NOTHING_JUDGED``),
    ``before`` at the evaluation before (empty at the first)."""
    if not policy or not failed:
        return False
    if policy == "confirmed":
        return bool(set(failed) & set(before))
    if policy == "regression":
        return any(key == GATE_BROKE or key.rsplit(" ", 1)[-1] in REGRESSION_CHECKS for key in failed)
    return True
