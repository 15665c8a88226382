"""Group-weighted accuracy, paired delta, flip rate, balanced accuracy and the chance/majority baselines.

Every function takes prediction records (mappings with ``dataset``, ``group_id``, ``label``,
``argmax`` and ``logits``). A group is ``(dataset, group_id)``: a source row and its variants.
Rows with ``label == -1`` have no correct answer and are left out of every accuracy, except
open-answer rows (primitive ``open``), whose generated answer is judged against the accepted
answers when the record is made (``correct``) and compared by its normalised text (``answer``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Mapping

from laya_robustness.answers import answer_of, is_correct, is_scored
from laya_robustness.records import option_count

Record = Mapping[str, object]
GroupKey = tuple[str, str]
_FIELDS = ("dataset", "group_id", "label", "argmax", "logits")


def _checked(records: Iterable[Record]) -> list[Record]:
    out = list(records)
    for i, r in enumerate(out):
        if not isinstance(r, Mapping):
            raise TypeError(f"record {i} is a {type(r).__name__}, not a mapping")
        missing = [f for f in _FIELDS if f not in r]
        if missing:
            raise ValueError(f"record {i} ({r.get('row_id', '?')}) lacks field(s) {', '.join(missing)}")
    return out


def group_key(record: Record) -> GroupKey:
    """The group a record belongs to: ``(dataset, group_id)``."""
    return (str(record["dataset"]), str(record["group_id"]))


def group_means(records: Iterable[Record]) -> dict[GroupKey, float]:
    """Mean correctness of each group's scored rows (is_scored); groups without one are left out."""
    hits: dict[GroupKey, list[bool]] = defaultdict(list)
    for r in _checked(records):
        if is_scored(r):
            hits[group_key(r)].append(is_correct(r))
    return {g: sum(v) / len(v) for g, v in hits.items()}


def group_accuracy(records: Iterable[Record]) -> float | None:
    """Group-weighted accuracy: acc = (1/G) sum_g (1/n_g) sum_{i in g} [argmax_i == label_i].

    None without a scored row.

    >>> rows = [dict(dataset="d", group_id="a", label=0, argmax=0, logits=[1, 0])] * 7
    >>> rows += [dict(dataset="d", group_id="b", label=0, argmax=1, logits=[0, 1])]
    >>> group_accuracy(rows)
    0.5
    """
    means = group_means(records)
    return sum(means.values()) / len(means) if means else None


def paired_deltas(records: Iterable[Record], orig_records: Iterable[Record]) -> dict[GroupKey, float]:
    """Per group present in both: mean correctness of ``records`` minus that of ``orig_records``."""
    fam, orig = group_means(records), group_means(orig_records)
    return {g: fam[g] - orig[g] for g in fam if g in orig}


def paired_delta(records: Iterable[Record], orig_records: Iterable[Record]) -> float | None:
    """Paired delta on the groups present in both: (1/G') sum_g (acc_g(family) - acc_g(orig)).

    This is the family's group-weighted accuracy minus the unperturbed one, on the same groups.
    """
    deltas = paired_deltas(records, orig_records)
    return sum(deltas.values()) / len(deltas) if deltas else None


def orig_by_group(orig_records: Iterable[Record]) -> dict[GroupKey, Record]:
    """The unperturbed record of each group; a group with two of them is an error."""
    out: dict[GroupKey, Record] = {}
    for r in _checked(orig_records):
        g = group_key(r)
        if g in out:
            raise ValueError(f"group {g[0]}/{g[1]} has more than one unperturbed (orig) row")
        out[g] = r
    return out


def group_flips(records: Iterable[Record], orig_records: Iterable[Record]) -> dict[GroupKey, float]:
    """Per group with an orig row: the share of its rows whose answer (answer_of) differs from the orig row's."""
    orig = orig_by_group(orig_records)
    flips: dict[GroupKey, list[bool]] = defaultdict(list)
    for r in _checked(records):
        g = group_key(r)
        if g in orig:
            flips[g].append(answer_of(r) != answer_of(orig[g]))
    return {g: sum(v) / len(v) for g, v in flips.items()}


def flip_rate(records: Iterable[Record], orig_records: Iterable[Record]) -> float | None:
    """Flip rate: (1/G) sum_g (1/n_g) sum_{i in g} [argmax_i != argmax_orig(g)], over groups with an orig row.

    Labels play no part: a flip counts whether or not the new answer is right.

    >>> orig = [dict(dataset="d", group_id="a", label=0, argmax=0, logits=[1, 0])]
    >>> var = [dict(orig[0], argmax=1), dict(orig[0]), dict(orig[0]), dict(orig[0])]
    >>> flip_rate(var, orig)
    0.25
    """
    flips = group_flips(records, orig_records)
    return sum(flips.values()) / len(flips) if flips else None


def balanced_accuracy(records: Iterable[Record]) -> float | None:
    """Mean per-label recall, group-weighted: row i of group g weighs w_i = 1 / n_g (its scored rows).

    recall_L = sum_{i: y_i = L} w_i [argmax_i = L] / sum_{i: y_i = L} w_i;  balanced = mean over labels seen.
    """
    scored = [r for r in _checked(records) if r["label"] >= 0]
    sizes = Counter(group_key(r) for r in scored)
    hit: dict[int, float] = defaultdict(float)
    weight: dict[int, float] = defaultdict(float)
    for r in scored:
        w = 1.0 / sizes[group_key(r)]
        weight[r["label"]] += w
        hit[r["label"]] += w * is_correct(r)
    return sum(hit[k] / weight[k] for k in weight) / len(weight) if weight else None


def _scored_origs(records: Iterable[Record], orig_records: Iterable[Record]) -> list[Record]:
    """The scored orig row of each group of ``records`` (groups without one are left out)."""
    orig = orig_by_group(orig_records)
    groups = {group_key(r) for r in _checked(records)}
    return [orig[g] for g in sorted(groups) if g in orig and orig[g]["label"] >= 0]


def chance_rate(records: Iterable[Record], orig_records: Iterable[Record]) -> float | None:
    """Chance accuracy: (1/G) sum_g 1 / k_g, k_g = number of options of group g's orig row."""
    origs = _scored_origs(records, orig_records)
    return sum(1.0 / option_count(r) for r in origs) / len(origs) if origs else None


def majority_rate(records: Iterable[Record], orig_records: Iterable[Record]) -> float | None:
    """Majority baseline: max_L (1/G) sum_g [y_orig(g) = L], each group counted once."""
    labels = Counter(r["label"] for r in _scored_origs(records, orig_records))
    return max(labels.values()) / sum(labels.values()) if labels else None

