"""The rows every report shows: one per (family, dataset) cell, its headline numbers and its checks' verdict.

Which blocks, families and columns appear comes from the family declarations
(``laya_robustness.families``): a block's columns are the headline metrics of its families (plus
``ece`` where its cells have one), families in declaration order, then any family the summary holds
that no declaration names. A cell's verdict is ``laya_robustness.gate.verdict.cell_verdict`` of its
check results; each check is marked pass, undecided (judged on its interval, the evidence goes
neither way: no failure), fail, xfail (a declared known limitation that still fails, or is only
borderline), xpass (one that now passes clearly) or n/a (its statistic is not available: ``max_ece`` of a
generation-only scorer).

>>> from laya_robustness.gate.results import CheckResult
>>> bad = CheckResult("text", "vsr", "max_flip", False, 0.3, 0.2, None, "flip rate 0.3 > max_flip 0.2")
>>> v = cell_verdicts([bad], lambda family, dataset, check: None)[("text", "vsr")]
>>> v.outcome, v.short()
('fail', 'FAIL max_flip')
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, Iterable, Mapping, Sequence

from laya_robustness.families import blocks, declared
from laya_robustness.gate.judgement import evaluate_cell, evaluate_invariance
from laya_robustness.gate.results import INVARIANCE, NOT_APPLICABLE, CheckResult
from laya_robustness.gate.verdict import FAIL, PASS, XFAIL, XPASS, cell_verdict
from laya_robustness.records import ORIG

UNDECIDED = "undecided"
#: How a check or a cell outcome is written in every report.
MARKS = {PASS: "ok", UNDECIDED: "ok?", FAIL: "FAIL", XFAIL: "xfail", XPASS: "XPASS", NOT_APPLICABLE: "n/a"}
#: The outcome of a cell no limit was checked on.
UNCHECKED = "unchecked"
#: known(family, dataset, check) -> the reason of a declared known limitation, or None.
Known = Callable[[str, str, str], "str | None"]
_RESULT_FIELDS = tuple(f.name for f in fields(CheckResult))
#: The fields a check result must have; the others (judge, decision, se...) have defaults.
_REQUIRED_FIELDS = tuple(f.name for f in fields(CheckResult) if f.default is MISSING and f.default_factory is MISSING)


@dataclass(frozen=True)
class CheckMark:
    """One check of a cell as reports show it: its status, value, limit, interval and why."""

    check: str
    status: str  # pass, undecided, fail, xfail, xpass or not applicable
    value: float | None
    limit: float
    interval: tuple[float, float] | None
    detail: str
    reason: str | None  # the known limitation's reason, if one is declared


@dataclass(frozen=True)
class CellVerdict:
    """The outcome of a cell (pass / fail / xfail / xpass, or unchecked) and its checks."""

    outcome: str
    checks: tuple[CheckMark, ...] = ()

    def deciding(self) -> tuple[CheckMark, ...]:
        """The checks that decide the outcome: the failures, else the fixed limitations, else the expected ones."""
        return tuple(c for c in self.checks if c.status == self.outcome) if self.outcome != PASS else ()

    def short(self) -> str:
        """``ok``, ``-`` (no check), or the outcome and its deciding checks: ``FAIL max_flip, max_drop``."""
        if self.outcome == UNCHECKED:
            return "-"
        names = ", ".join(c.check for c in self.deciding())
        return f"{MARKS[self.outcome]} {names}".strip()


NO_CHECK = CellVerdict(UNCHECKED)


def as_result(result: CheckResult | Mapping[str, Any]) -> CheckResult:
    """A CheckResult from itself or from its dict form (the session's results carry a ``device`` too)."""
    if isinstance(result, CheckResult):
        return result
    missing = [k for k in _REQUIRED_FIELDS if k not in result]
    if missing:
        raise ValueError(f"check result {dict(result)!r} lacks {', '.join(missing)}")
    values = {k: result[k] for k in _RESULT_FIELDS if k in result}
    if values["interval"] is not None:
        values["interval"] = tuple(values["interval"])
    return CheckResult(**values)


def check_status(result: CheckResult, reason: str | None) -> str:
    """How one check is marked: a known limitation is xfail unless it passes clearly (xpass); another check
    is fail, undecided or pass as its decision says."""
    if result.decision == NOT_APPLICABLE:
        return NOT_APPLICABLE
    if reason is not None:
        return XPASS if result.decision == "pass" else XFAIL
    return {"fail": FAIL, "undecided": UNDECIDED}.get(result.decision, PASS)


def cell_verdicts(results: Iterable[CheckResult | Mapping[str, Any]], known: Known) -> dict[tuple[str, str], CellVerdict]:
    """(family, dataset) -> its verdict; for invariance conditions the key is ("invariance", condition).

    A check evaluated twice on a cell (e.g. by a repeated test) counts once, its last result kept.
    """
    by_cell: dict[tuple[str, str], dict[str, CheckResult]] = {}
    for r in map(as_result, results):
        by_cell.setdefault((r.family, r.dataset), {})[r.check] = r
    out = {}
    for (family, dataset), checks in by_cell.items():
        reasons = {c: known(family, dataset, c) for c in checks}
        verdict = cell_verdict(list(checks.values()), reasons.get)
        marks = []
        for c, r in checks.items():
            marks.append(CheckMark(c, check_status(r, reasons[c]), r.value, r.limit, r.interval, r.detail, reasons[c]))
        out[(family, dataset)] = CellVerdict(verdict.outcome, tuple(marks))
    return out


def evaluate_summary(summary: Mapping[str, Any], thresholds, invariance: Mapping[str, Any] | None = None
                     ) -> list[CheckResult]:
    """Every limit of ``thresholds`` checked on every cell of the summary (and invariance condition).

    What the gate's tests check, recomputed offline from the numbers: ``gate.judgement.evaluate_cell`` with
    ``thresholds.limits_for(family, dataset)``, judged as the gate judges them (each limit's judge; alpha / m
    over the m interval-judged limits of the summary's cells); an invariance condition that ran in bf16 gets the
    ``[invariance.bf16]`` limits. A check whose metric the cell lacks (or holds as None) fails,
    its detail saying so.
    """
    from laya_robustness.gate.judgement import Judgement
    from laya_robustness.run.pipeline.invariance import limits_section

    cells = []
    for block in summary_blocks(summary):
        for family, by_dataset in summary[block].items():
            for dataset, cell in by_dataset.items():
                if family == ORIG and cell.get("acc") is None:
                    continue  # orig of a caption set: no accuracy, and the gate checks none
                try:
                    cells.append((family, dataset, cell, thresholds.limits_for(family, dataset)))
                except KeyError:  # a row no family declares (e.g. one over several families): no limits
                    continue
    m = sum(thresholds.judge_for(f, d, c) == "interval" for f, d, _, limits in cells for c in limits)
    out: list[CheckResult] = []
    for family, dataset, cell, limits in cells:
        judgement = Judgement(lambda check, f=family, d=dataset: thresholds.judge_for(f, d, check),
                              thresholds.gate.alpha_each(m))
        for check, limit in limits.items():
            try:
                out += evaluate_cell(family, dataset, cell, {check: limit}, judgement)
            except KeyError as exc:  # the gate's test errors here: never a pass
                out.append(CheckResult(family, dataset, check, False, float("nan"), limit, None,
                                       str(exc).strip("'\"")))
    for condition, stats in sorted((invariance or {}).items()):
        section = limits_section(condition, stats.get("precision"))
        out += evaluate_invariance(condition, stats, thresholds.invariance_limits(section))
    return out


def summary_blocks(summary: Mapping[str, Any]) -> list[str]:
    """The declared blocks the summary holds, the flat one first."""
    return [b for b in blocks() if isinstance(summary.get(b), Mapping) and summary[b]]


def families_of(summary: Mapping[str, Any], block: str) -> list[str]:
    """The block's families in declaration order, then the undeclared ones (sorted)."""
    present = summary.get(block) or {}
    order = [f.name for f in declared() if f.name in present]
    return order + sorted(f for f in present if f not in order)


def columns_of(summary: Mapping[str, Any], block: str) -> list[str]:
    """The block's headline metric keys in declaration order, plus ``ece`` when a cell has one."""
    present = summary.get(block) or {}
    keys: list[str] = []
    for f in declared():
        if f.name in present:
            keys += [k for k in f.headline_keys if k not in keys]
    cells = [c for by_dataset in present.values() for c in by_dataset.values()]
    for c in cells:  # an undeclared family (e.g. a summary row over several families) shows what it has
        keys += [k for k in ("acc", "delta", "flip") if k in c and k not in keys]
    if "ece" not in keys and any(c.get("ece") is not None for c in cells):
        keys.append("ece")
    return keys


def number(value: float | None, key: str = "") -> str:
    """3 d.p.; deltas signed; None as "-"."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if key.startswith("delta") else f"{value:.3f}"


def delta_text(value: float | None) -> str:
    """An invariance delta (max |dp|, max |dlogit|) as ``1.0e-05``; ``n/a`` where the scorer has no logits."""
    return "n/a" if value is None else f"{value:.1e}"


def probability_lines(summary: Mapping[str, Any]) -> list[str]:
    """A line saying the probability-based numbers are not available, when a cell of the summary says so."""
    notes = {c["probabilities"] for b in summary_blocks(summary) for cells in summary[b].values()
             if isinstance(cells, Mapping) for c in cells.values() if isinstance(c, Mapping) and "probabilities" in c}
    return [f"probabilities: {note}: ECE, flip floors, probability deltas and the max_ece limit are n/a"
            for note in sorted(notes)]


def value_text(cell: Mapping[str, Any] | None, key: str, family: str = "", interval: bool = True) -> str:
    """``cell[key]`` at 3 d.p. with its 95% interval when the cell has ``<key>_ci``; orig's delta and flip are "-"."""
    if cell is None or cell.get(key) is None or family == ORIG and key in ("delta", "flip"):
        return "-"
    text = number(cell[key], key)
    ci = cell.get(f"{key}_ci")
    if interval and ci:
        text += f" [{number(ci[0], key)}, {number(ci[1], key)}]"
    return text


@dataclass(frozen=True)
class CellRow:
    """One row of a block table: the family, the dataset, the cell and its verdict."""

    block: str
    family: str
    dataset: str
    cell: Mapping[str, Any]
    verdict: CellVerdict


def caption_families() -> set[str]:
    """The families built from caption rows (the dual-encoder probes)."""
    return {f.name for f in declared() if f.source == "captions"}


def caption_datasets(summary: Mapping[str, Any]) -> set[str]:
    """The datasets of caption rows: those a caption-sourced family reports."""
    probes = caption_families()
    return {d for b in summary_blocks(summary) for f, cells in summary[b].items() if f in probes for d in cells}


def cell_rows(summary: Mapping[str, Any], verdicts: Mapping[tuple[str, str], CellVerdict], block: str) -> list[CellRow]:
    """The rows of one block: families in declaration order, datasets sorted. A question family's cell on
    caption rows (``orig`` counts them for a dual encoder) is left out unless a limit was checked on it."""
    present = summary.get(block) or {}
    captions, probes = caption_datasets(summary), caption_families()
    rows = [CellRow(block, f, d, present[f][d], verdicts.get((f, d), NO_CHECK))
            for f in families_of(summary, block) for d in sorted(present[f])]
    return [r for r in rows if r.family in probes or r.dataset not in captions or r.verdict.outcome != UNCHECKED]


def outcome_counts(verdicts: Mapping[tuple[str, str], CellVerdict]) -> dict[str, int]:
    """How many cells ended in each outcome (fail, xpass, xfail, pass), unchecked cells left out."""
    counts = {FAIL: 0, XPASS: 0, XFAIL: 0, PASS: 0}
    for v in verdicts.values():
        if v.outcome in counts:
            counts[v.outcome] += 1
    return counts


def verdict_line(verdicts: Mapping[tuple[str, str], CellVerdict]) -> str:
    """``2 FAIL, 0 XPASS, 5 xfail, 63 ok (cells with limits); invariance: 11 ok``."""
    cells = {k: v for k, v in verdicts.items() if k[0] != INVARIANCE}
    counts = outcome_counts(cells)
    line = ", ".join(f"{n} {MARKS[k]}" for k, n in counts.items()) + " (cells with limits)"
    conditions = outcome_counts(invariance_verdicts(verdicts))
    if any(conditions.values()):
        line += "; invariance: " + ", ".join(f"{n} {MARKS[k]}" for k, n in conditions.items() if n)
    return line


def text_rows(rows: Sequence[CellRow], columns: Sequence[str], intervals: Iterable[str] = ()) -> list[list[str]]:
    """Header and one text row per cell: family, dataset, each column (with its interval when the
    column is in ``intervals``), the short verdict."""
    intervals = set(intervals)
    shown = [k for k in columns if k in intervals and any(r.cell.get(f"{k}_ci") for r in rows)]
    header = ["family", "dataset", *[f"{k} [95% CI]" if k in shown else k for k in columns], "checks"]
    out = [header]
    for r in rows:
        out.append([r.family, r.dataset, *[value_text(r.cell, k, r.family, k in shown) for k in columns],
                    r.verdict.short()])
    return out


def gate_failures(verdicts: Mapping[tuple[str, str], CellVerdict]) -> list[tuple[str, str, CheckMark]]:
    """(family, dataset, check) of each check the gate fails on, as its tests and ``run_gate``'s ``failures`` count
    them (the training callback's "N failed checks"): every failed check, and each known limitation that now passes
    in a cell whose outcome is XPASS. A cell can fail on several checks: ``verdict_line`` counts cells."""
    return [(family, dataset, c) for (family, dataset), v in sorted(verdicts.items()) for c in v.checks
            if c.status == FAIL or (c.status == XPASS and v.outcome == XPASS)]


def failed_checks_text(n: int) -> str:
    """``3 failed checks``: the count of ``gate_failures`` in the words of the training callback's console line."""
    return f"{n} failed check{'' if n == 1 else 's'}"


def problems(verdicts: Mapping[tuple[str, str], CellVerdict]) -> list[tuple[str, str, str, CheckMark]]:
    """The checks a reader must act on, sorted: (status, family, dataset, check) for every failed check and
    every known limitation that now passes (xpass)."""
    return [(c.status, family, dataset, c) for (family, dataset), v in sorted(verdicts.items())
            for c in v.checks if c.status in (FAIL, XPASS)]


def invariance_verdicts(verdicts: Mapping[tuple[str, str], CellVerdict]) -> dict[str, CellVerdict]:
    """condition -> the verdict of its limits."""
    return {dataset: v for (family, dataset), v in verdicts.items() if family == INVARIANCE}
