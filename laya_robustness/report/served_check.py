"""A served deploy checked against the checkpoint in process (``python -m laya_robustness served-check SERVED
INPROCESS``): the two runs' answers to the questions both asked, family by family.

Questions are matched by their identity: (dataset, family, variant, row_id); a matched pair must be the same
question in both records (group, cluster, primitive, label, number of images and of options, category and meta: a
donor cluster, a kept option, a rephrasing), else the runs asked other questions and nothing is compared. Rows per
set may differ: a run of fewer rows asks the same questions of the rows it has (``families.row_set``).

Not comparable (status 4): no question in common; a matched pair that is not the same question; another seed; the
same rows per set over other data (``data_fingerprint``); other ``temperatures`` (the probabilities are calibrated
differently); other weights (``weights_sha256``, where both runs' meta has one: a served model reports none, and
then the weights are named as not checked).

Per family, over its matched questions:

- ``agreement``: the share with the same answer (the chosen option, ``argmax``, an unparsed answer included; the
  normalised ``answer`` of an open question);
- ``|dp|``: ``dp = p_SERVED[a] - p_INPROCESS[a]``, where ``a`` is the option INPROCESS chose (its ``argmax``) and
  ``p`` each record's option probabilities, over the questions both answered with probabilities; its mean and max.

The status is 1 when a family's agreement is below ``min_agreement`` or its max |dp| above ``max_dp``, else 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from laya_robustness.records import Record, option_count
from laya_robustness.report.html import visible
from laya_robustness.report.markdown import md
from laya_robustness.report.read_back import ReportFolder, read_folder

PASSED, FAILED, NOT_COMPARABLE = 0, 1, 4
#: The defaults of ``--min-agreement`` and ``--max-dp``.
MIN_AGREEMENT, MAX_DP = 0.95, 0.1
#: What makes a question, besides its identity: the fields of a record that the data, seed and family decide.
QUESTION_FIELDS = ("group_id", "cluster", "primitive", "label", "n_images", "category", "meta")
#: The most questions named when matched pairs differ.
NAMED = 3

Key = tuple[str, str, str, str]  # (dataset, family, variant, row_id)


@dataclass(frozen=True)
class FamilyAgreement:
    """One family's matched questions: how many, how many answered alike, and |dp| over those with probabilities."""

    family: str
    matched: int
    same: int
    dps: tuple[float, ...]

    @property
    def agreement(self) -> float:
        return self.same / self.matched

    @property
    def mean_dp(self) -> float | None:
        return sum(self.dps) / len(self.dps) if self.dps else None

    @property
    def max_dp(self) -> float | None:
        return max(self.dps) if self.dps else None


@dataclass(frozen=True)
class ServedCheck:
    """What ``served-check`` found: the two folders, why they cannot be compared (empty when they can), each family's
    agreement, the weights note, the limits and the status (see the module doc)."""

    served: Path
    inprocess: Path
    min_agreement: float
    max_dp: float
    not_comparable: list[str] = field(default_factory=list)
    families: list[FamilyAgreement] = field(default_factory=list)
    weights: str = ""

    def failures(self) -> list[str]:
        """Each family past a limit, in words."""
        out = []
        for f in self.families:
            if f.agreement < self.min_agreement:
                out.append(f"{f.family}: agreement {f.agreement:.3f} below {self.min_agreement:g}")
            if f.max_dp is not None and f.max_dp > self.max_dp:
                out.append(f"{f.family}: max |dp| {f.max_dp:.4f} above {self.max_dp:g}")
        return out

    @property
    def status(self) -> int:
        if self.not_comparable:
            return NOT_COMPARABLE
        return FAILED if self.failures() else PASSED

    def verdict(self) -> str:
        if self.not_comparable:
            return f"NOT COMPARABLE (exit 4): {'; '.join(self.not_comparable)}"
        failures = self.failures()
        if failures:
            return f"DIFFERS (exit 1): {'; '.join(failures)}"
        n = sum(f.matched for f in self.families)
        return (f"SAME (exit 0): {n} question(s) of {len(self.families)} family(ies), agreement at least "
                f"{self.min_agreement:g} and |dp| at most {self.max_dp:g} in each")


def check_limits(min_agreement: float, max_dp: float) -> None:
    """ValueError naming the option when a limit is outside [0, 1]."""
    for flag, value in (("--min-agreement", min_agreement), ("--max-dp", max_dp)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{flag} must be between 0 and 1, got {value}")


def read_pair(served: str | Path, inprocess: str | Path) -> tuple[ReportFolder, ReportFolder]:
    """The two report folders, each read back and checked (``report.read_back.read_folder``)."""
    return read_folder(served), read_folder(inprocess)


def _weights(meta: Mapping) -> Mapping | None:
    model = meta.get("model")
    weights = model.get("weights_sha256") if isinstance(model, Mapping) else None
    return weights or None


def meta_differences(served: Mapping, inprocess: Mapping) -> tuple[list[str], str]:
    """(what makes the two runs' meta not comparable, the weights note) (see the module doc)."""
    out = [f"{key} differs ({served.get(key)!r} in SERVED, {inprocess.get(key)!r} in INPROCESS)"
           for key in ("seed", "temperatures") if served.get(key) != inprocess.get(key)]
    if served.get("rows_per_set") == inprocess.get("rows_per_set") and \
            served.get("data_fingerprint") != inprocess.get("data_fingerprint"):
        out.append(f"data_fingerprint differs at the same rows per set ({served.get('data_fingerprint')!r} in "
                   f"SERVED, {inprocess.get('data_fingerprint')!r} in INPROCESS): other data")
    mine, theirs = _weights(served), _weights(inprocess)
    if mine is not None and theirs is not None:
        if mine != theirs:
            out.append(f"weights_sha256 differs ({mine!r} in SERVED, {theirs!r} in INPROCESS): other weights")
            return out, "weights: other weights (weights_sha256)"
        return out, "weights: the same (weights_sha256)"
    lacking = " and ".join(name for name, w in (("SERVED", mine), ("INPROCESS", theirs)) if w is None)
    return out, (f"weights: not checked ({lacking} records no weights_sha256; a server does not report its "
                 "weights): make sure the deploy serves the checkpoint INPROCESS ran")


def _key(record: Record) -> Key:
    return (record.dataset, record.family, record.variant, record.row_id)


def _question(record: Record) -> dict:
    return {**{k: record.get(k) for k in QUESTION_FIELDS}, "options": option_count(record)}


def _answer(record: Record):
    return record.get("answer") if record.is_open else record.argmax


def _dp(served: Record, inprocess: Record) -> float | None:
    """|p_SERVED[a] - p_INPROCESS[a]| at INPROCESS's chosen option ``a``; None without probabilities on either side."""
    a = inprocess.argmax
    if served.is_open or not served.probs or not inprocess.probs or not 0 <= a < len(served.probs):
        return None
    return abs(served.probs[a] - inprocess.probs[a])


def unlike_questions(pairs: list[tuple[Record, Record]]) -> list[str]:
    """The matched pairs that are not the same question: the first ``NAMED`` named with the first field that
    differs, and how many more."""
    out = []
    for s, i in pairs:
        mine, theirs = _question(s), _question(i)
        if mine != theirs:
            name = next(k for k in mine if mine[k] != theirs[k])
            out.append(f"{s.row_id!r}: {name} is {mine[name]!r} in SERVED, {theirs[name]!r} in INPROCESS")
    if len(out) > NAMED:
        out = out[:NAMED] + [f"and {len(out) - NAMED} more"]
    return out


def served_check(served: ReportFolder, inprocess: ReportFolder, min_agreement: float = MIN_AGREEMENT,
                 max_dp: float = MAX_DP) -> ServedCheck:
    """The served run checked against the in-process one on the questions both asked (see the module doc)."""
    check_limits(min_agreement, max_dp)
    made = lambda **kw: ServedCheck(served.folder, inprocess.folder, min_agreement, max_dp, **kw)  # noqa: E731
    why, weights = meta_differences(served.summary.get("meta", {}), inprocess.summary.get("meta", {}))
    theirs = {_key(r): r for r in inprocess.records}
    pairs = [(r, theirs[_key(r)]) for r in served.records if _key(r) in theirs]
    if not pairs:
        why.append("no question in common (compare runs of the same data and families)")
    unlike = unlike_questions(pairs)
    if unlike:
        why.append(f"{len([p for p in pairs if _question(p[0]) != _question(p[1])])} matched question(s) differ "
                   f"({'; '.join(unlike)}): the runs asked other questions (other data or rows)")
    if why:
        return made(not_comparable=why, weights=weights)
    by_family: dict[str, list[tuple[Record, Record]]] = {}
    for s, i in pairs:
        by_family.setdefault(s.family, []).append((s, i))
    families = []
    for family, matched in sorted(by_family.items()):
        dps = tuple(d for s, i in matched if (d := _dp(s, i)) is not None)
        families.append(FamilyAgreement(family, len(matched), sum(_answer(s) == _answer(i) for s, i in matched), dps))
    return made(families=families, weights=weights)


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _rows(check: ServedCheck) -> list[tuple[str, str, str, str, str]]:
    return [(f.family, str(f.matched), f"{f.agreement:.3f}", _number(f.mean_dp, 4), _number(f.max_dp, 4))
            for f in check.families]


HEADER = ("family", "matched", "agreement", "mean |dp|", "max |dp|")


def text_lines(check: ServedCheck) -> list[str]:
    """The check for a terminal: a line per family, the weights note and the verdict last; control characters of
    a name written out (``report.html.visible``)."""
    lines = [f"served-check {check.served} (SERVED) against {check.inprocess} (INPROCESS)", f"  {check.weights}"]
    if not check.not_comparable:
        rows = [HEADER, *_rows(check)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
        lines += ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in rows]
        lines.append("  (|dp| = |p_SERVED[a] - p_INPROCESS[a]|, a the option INPROCESS chose; '-': no probabilities)")
    return [visible(line) for line in [*lines, check.verdict()]]


def markdown(check: ServedCheck) -> str:
    """The check as markdown: the verdict, the weights note and a table per family; every name through ``md``."""
    out = ["## Served deploy against the checkpoint in process", "", f"**{md(check.verdict())}**", "",
           f"SERVED: {md(check.served)}; INPROCESS: {md(check.inprocess)}", "", md(check.weights), ""]
    if check.not_comparable:
        return "\n".join([*out, *[f"- {md(why)}" for why in check.not_comparable]]) + "\n"
    out += ["| " + " | ".join(md(h) for h in HEADER) + " |", "| --- | ---: | ---: | ---: | ---: |"]
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in _rows(check)]
    out += ["", "\\|dp\\| = \\|p<sub>SERVED</sub>\\[a\\] - p<sub>INPROCESS</sub>\\[a\\]\\|, a the option "
            "INPROCESS chose; `-`: no probabilities."]
    return "\n".join(out) + "\n"
