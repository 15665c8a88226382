"""A gate cell's verdict as a pytest outcome: a failure naming what crossed its limit and the worst rows, a strict
XPASS when a known limitation no longer holds, an xfail with the limitation's reason, or a pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

from laya_robustness.gate.explain import failure_message, worst_groups
from laya_robustness.gate.results import NOT_APPLICABLE, CheckResult
from laya_robustness.gate.verdict import FAIL, XFAIL, XPASS, Verdict


def cell_outcome(verdict: Verdict, records: Sequence[Mapping[str, Any]], family: str, dataset: str,
                 limits_files: Sequence[Path]) -> None:
    """Fail, XPASS(strict), xfail or (every limit not applicable) skip the running test as ``verdict`` says (a
    pass returns; a limit that is not applicable beside others is reported with the results, not here)."""
    if verdict.outcome == NOT_APPLICABLE:
        pytest.skip("; ".join(r.detail for r in verdict.not_applicable))
    if verdict.outcome == FAIL:
        pytest.fail("\n\n".join(failure_message(r, worst_groups(records, family, dataset, r.check))
                                for r in verdict.failures), pytrace=False)
    if verdict.outcome == XPASS:
        where = ", ".join(str(Path(p).name) for p in limits_files)
        fixed = [f"  {r.check} now passes ({r.value:.4g} vs {r.limit:.4g})" for r in verdict.fixed]
        pytest.fail("\n".join(["[XPASS(strict)] known limitation no longer holds:", *fixed,
                               f"remove the known limitation{'s' if len(fixed) > 1 else ''} from {where}"]),
                    pytrace=False)
    if verdict.outcome == XFAIL:
        # pytrace=False, as for pytest.fail above: the reason says it all, and pytest skips formatting
        # (parsing the source of) a traceback that the xfail report would throw away.
        raise pytest.xfail.Exception("known limitation: " + "; ".join(f"{r.check}: {why}"
                                                                      for r, why in verdict.expected),
                                     pytrace=False)


def invariance_outcome(results: Sequence[CheckResult], stats: Mapping[str, Any]) -> None:
    """Fail the running test when a limit of the condition failed, naming the flipped (else the worst) rows."""
    failed = [r for r in results if not r.passed]
    if not failed and results and all(r.decision == NOT_APPLICABLE for r in results):
        pytest.skip("; ".join(r.detail for r in results))
    if failed:
        worst = sorted(stats["per_row"], key=lambda e: (-(e["abs_dlogit"] or 0.0), e["row_id"]))[:5]
        lines = [_row_line(e) for e in (stats["flipped"] or worst)]
        pytest.fail("\n\n".join(failure_message(r, lines) for r in failed), pytrace=False)


def _row_line(e: Mapping[str, Any]) -> str:
    """One row of an invariance failure: answers, margins and deltas (a served model's texts where it has no logits)."""
    line = f"{e['row_id']}: answer {e['answer'][0]} -> {e['answer'][1]}"
    if e.get("abs_dlogit") is None:
        return line + f", text {e['text'][0]!r} -> {e['text'][1]!r}" if "text" in e else line
    return (line + f", margin {e['margin'][0]:.4f} -> {e['margin'][1]:.4f}, |dp| {e['abs_dp']:.2e}, "
            f"|dlogit| {e['abs_dlogit']:.2e}")


def regression_outcome(results: Sequence[CheckResult], cell: Mapping[str, Any]) -> None:
    """Fail the running test when a regression limit failed, with the McNemar counts behind it."""
    failed = [r for r in results if not r.passed]
    if failed:
        lines = []
        for result in failed:
            if result.check == "max_regression":
                what, test = "accuracy", cell["mcnemar_acc"]
                n_worse, n_other, words = test["b"], test["c"], "right in the baseline and wrong now"
            else:
                what, test = "flips", cell["mcnemar_flip"]
                n_worse, n_other, words = test["c"], test["b"], "flipped now and not in the baseline"
            lines.append(failure_message(result, [
                f"McNemar on {what}: {n_worse} rows {words}, {n_other} the other way (p = {test['p']:.3g}) "
                f"over {test['n_pairs']} matched rows"]))
        pytest.fail("\n".join(lines), pytrace=False)
