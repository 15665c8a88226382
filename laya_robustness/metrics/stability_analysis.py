"""One model's stability study over its prediction records: answer entropy per sample and modality, stable
shares, instability by question category, accuracy given stability, correlations and the conditional mutual
information ratio (the stability paper's Sec. 3.2, 5, 5.2, Fig. 3 and Tables 5, 7 and 8).

A *sample* is a group (``dataset``, ``group_id``): its orig record and every variant built from it. Each
meaning-preserving family changes one *modality* (``visual``, ``phrasing`` or ``language``, from the
mapping ``modality_of``); families without one (controls, option-set and adversarial families) are left
out. For a sample and a modality, the answer set holds the orig answer and the answer of every variant of
that modality's families (the paper: "both Q_i, I_i also contain the original samples"), and

    H = -sum_a p_a ln p_a   (eq. 2; natural log, nats; p_a = share of the answers equal to a)

H = 0 iff every answer equals the orig answer: the sample is *stable* under that modality (V-, P- or
L-stable). ``V+P`` is stable under both; ``All`` under every modality the dataset has variants of.

>>> from laya_robustness.metrics.stability_analysis import answer_entropy
>>> round(answer_entropy(["yes", "yes", "no", "no"]), 4)  # ln 2
0.6931
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from laya_robustness.answers import answer_of, is_correct, is_scored
from laya_robustness.metrics.information import BINNINGS, auto_levels, cmi_ratio
from laya_robustness.records import PredictionError, Record, parse_records

#: The modalities in table order (the paper's V, P, L); a family's declaration names its own.
MODALITIES = ("visual", "phrasing", "language")
#: Short column names of the stability types (a modality, or a combination of them).
SHORT = {"visual": "V", "phrasing": "P", "language": "L", "visual+phrasing": "V+P", "all": "All"}
#: Table 7's column order: the paper's Phrasing, Visual, Language, V+P, All.
TABLE7_TYPES = ("phrasing", "visual", "language", "visual+phrasing", "all")
#: Width (nats) of the positive bins of the entropy histogram; its first bin is H = 0 exactly.
HIST_WIDTH = 0.25
#: The levels per variable at which the mutual-information ratio is also given (its sensitivity check).
LEVEL_SENSITIVITY = (2, 3, 5, 10)


# -- answers and correctness ------------------------------------------------------------------------


def confidence_of(record: Mapping[str, Any]) -> float | None:
    """The confidence of a record: its largest calibrated probability, max_k probs_k; None for a record with
    fewer than two (an open-answer row has none)."""
    probs = record["probs"]
    return float(max(probs)) if len(probs) >= 2 else None


def answer_entropy(answers: Sequence[Hashable], base: float = math.e) -> float:
    """H = -sum_a p_a log p_a over the distinct answers a, p_a = n_a / n (eq. 2); nats unless ``base`` is given.

    H = 0 exactly iff all answers are equal.

    >>> answer_entropy([1, 1, 1]), answer_entropy(["yes", "no"], base=2)
    (0.0, 1.0)
    >>> round(answer_entropy(["a", "a", "b", "c"]), 4)  # -(1/2 ln 1/2 + 2 * 1/4 ln 1/4)
    1.0397
    """
    if not answers:
        raise ValueError("the entropy of an empty answer set is undefined")
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base must be a number > 1, got {base!r}")
    counts = Counter(answers)
    if len(counts) == 1:
        return 0.0
    n = len(answers)
    return math.fsum(-(c / n) * math.log(c / n) for c in counts.values()) / math.log(base)


# -- samples ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One group's stability facts (see the module doc).

    ``entropy`` and ``n_variants`` per modality with at least one variant; ``family_stable`` per family
    with a modality: every answer of the family's variants equals the orig answer. ``correct`` and
    ``confidence`` are the orig record's (``is_correct``, ``confidence_of``).
    """

    dataset: str
    group_id: str
    cluster: str
    category: str
    correct: bool | None
    confidence: float | None
    entropy: Mapping[str, float]
    n_variants: Mapping[str, int]
    family_stable: Mapping[str, bool]

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.group_id)

    def stable(self, modalities: Sequence[str]) -> bool | None:
        """Stable under every one of ``modalities`` (H = 0 for each); None when one of them has no variant."""
        if any(m not in self.entropy for m in modalities):
            return None
        return all(self.entropy[m] == 0.0 for m in modalities)


def _category(orig: Record) -> str:
    category = orig.get("category")
    if category is None or category == "":
        return orig.dataset
    if not isinstance(category, str):
        raise PredictionError(orig.row_id, "category", f"expected a string, got {category!r}")
    return category


def _check_answer_kind(orig: Record, record: Record) -> None:
    if ("answer" in orig) != ("answer" in record):
        has, lacks = (orig, record) if "answer" in orig else (record, orig)
        raise PredictionError(lacks.row_id, "answer", f"missing, while {has.row_id} of the same group "
                                                      f"({record.group_id}) has an answer text")


def grouped(records: Iterable[Any]) -> tuple[dict[tuple[str, str], Record], dict[tuple[str, str], list[Record]]]:
    """Parsed records split into the orig record of each group and the other records of each group.

    Duplicate row ids (within a dataset) and two orig records in one group are errors.
    """
    orig: dict[tuple[str, str], Record] = {}
    others: dict[tuple[str, str], list[Record]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for r in parse_records(records):
        if (r.dataset, r.row_id) in seen:
            raise PredictionError(r.row_id, "row_id", f"occurs more than once in dataset {r.dataset!r}")
        seen.add((r.dataset, r.row_id))
        if r.is_orig:
            if r.group in orig:
                raise PredictionError(r.row_id, "family", f"a second orig record of group {r.group_id!r} "
                                                          f"(the first is {orig[r.group].row_id})")
            orig[r.group] = r
        else:
            others[r.group].append(r)
    return orig, dict(others)


def samples(records: Iterable[Any], modality_of: Mapping[str, str | None]) -> list[Sample]:
    """One :class:`Sample` per group with an orig record, sorted by (dataset, group_id).

    ``modality_of`` maps a family to its modality (``laya_robustness.families.modalities()``); families it
    does not name, or names with None, are left out. A group without an orig record is left out.
    """
    for family, modality in modality_of.items():
        if modality is not None and modality not in MODALITIES:
            raise ValueError(f"modality_of[{family!r}] = {modality!r} is not one of {', '.join(MODALITIES)}")
    orig, others = grouped(records)
    out = []
    for key in sorted(orig):
        o = orig[key]
        by_modality: dict[str, list] = defaultdict(list)
        by_family: dict[str, list] = defaultdict(list)
        for r in others.get(key, ()):
            modality = modality_of.get(r.family)
            if modality is None:
                continue
            _check_answer_kind(o, r)
            by_modality[modality].append(answer_of(r))
            by_family[r.family].append(answer_of(r))
        base = answer_of(o)
        out.append(Sample(
            dataset=o.dataset, group_id=o.group_id, cluster=o.cluster, category=_category(o),
            correct=is_correct(o) if is_scored(o) else None, confidence=confidence_of(o),
            entropy={m: answer_entropy([base, *a]) for m, a in sorted(by_modality.items())},
            n_variants={m: len(a) for m, a in sorted(by_modality.items())},
            family_stable={f: all(x == base for x in a) for f, a in sorted(by_family.items())},
        ))
    return out


def present_modalities(group: Sequence[Sample]) -> tuple[str, ...]:
    """The modalities some sample of ``group`` has variants of, in table order."""
    have = {m for s in group for m in s.entropy}
    return tuple(m for m in MODALITIES if m in have)


def stability_types(modalities: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each stability type and the modalities it needs: one per modality, ``visual+phrasing``, ``all``.

    ``all`` means every modality of ``modalities`` (those the dataset has variants of).
    """
    out = {m: (m,) for m in MODALITIES}
    out["visual+phrasing"] = ("visual", "phrasing")
    out["all"] = tuple(modalities)
    return out


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


# -- Fig. 3: stable shares and the entropy histogram ----------------------------------------------------


def stable_shares(group: Sequence[Sample], modalities: Sequence[str]) -> dict:
    """Per stability type: share = n_stable / n_samples over the samples that have every modality it needs.

    ``all`` is None when ``modalities`` is empty.
    """
    out = {}
    for name, needs in stability_types(modalities).items():
        flags = [s.stable(needs) for s in group] if needs else []
        flags = [f for f in flags if f is not None]
        out[name] = {"share": _share(flags), "n_stable": sum(flags), "n_samples": len(flags)}
    return out


def entropy_histogram(group: Sequence[Sample], modalities: Sequence[str], width: float = HIST_WIDTH) -> dict:
    """Counts of the answer entropy per modality (Fig. 3), in nats.

    Bin 0 holds H = 0 (stable samples); bin i >= 1 holds H in ((i-1) w, i w], w = ``width``, up to the
    largest entropy of any modality (every modality has the same bins). ``edges`` are the upper edges.

    >>> s = [Sample("d", str(i), "c", "d", True, 1.0, {"visual": h}, {"visual": 2}, {}) for i, h in
    ...      enumerate([0.0, 0.0, 0.6931, 0.1])]
    >>> entropy_histogram(s, ["visual"])["counts"]
    {'visual': [2, 1, 0, 1]}
    """
    values = {m: [s.entropy[m] for s in group if m in s.entropy] for m in modalities}
    top = max((max(v) for v in values.values() if v), default=0.0)
    n_pos = max(1, math.ceil(top / width - 1e-9))
    counts = {}
    for m, vals in values.items():
        c = [0] * (n_pos + 1)
        for h in vals:
            c[0 if h == 0.0 else min(n_pos, max(1, math.ceil(h / width - 1e-9)))] += 1
        counts[m] = c
    return {"unit": "nats", "edges": [0.0] + [round(width * i, 10) for i in range(1, n_pos + 1)], "counts": counts,
            "n_samples": {m: len(v) for m, v in values.items()}}


# -- Table 5: instability by question category ------------------------------------------------------------


def category_table(group: Sequence[Sample], modality_of: Mapping[str, str | None]) -> dict:
    """Per perturbation type and question category: the share of samples affected by at least one variant.

    affected(type, category) = #{samples of the category not stable under type} / #{samples of the category
    with a variant of type}. A type is a family (stable: all its answers equal the orig answer) or
    ``any <modality>`` (H of the modality > 0). ``mean_over_categories`` is the unweighted mean over the
    categories (the paper's "avg"), ``all_samples`` the share over every sample.
    """
    categories = sorted({s.category for s in group})
    modalities = present_modalities(group)
    families = sorted({f for s in group for f in s.family_stable},
                      key=lambda f: (MODALITIES.index(modality_of[f]), f))
    types: list[tuple[str, Any]] = [(f, lambda s, f=f: s.family_stable.get(f)) for f in families]
    types += [(f"any {m}", lambda s, m=m: s.stable((m,))) for m in modalities]
    out = {}
    for name, stable in types:
        affected: dict[str, list[bool]] = {c: [] for c in categories}
        for s in group:
            flag = stable(s)
            if flag is not None:
                affected[s.category].append(not flag)
        by_cat = {c: _share(v) for c, v in affected.items()}
        defined = [v for v in by_cat.values() if v is not None]
        out[name] = {
            "by_category": by_cat,
            "n_by_category": {c: len(v) for c, v in affected.items()},
            "mean_over_categories": _mean(defined),
            "all_samples": _share([x for v in affected.values() for x in v]),
        }
    return {"categories": categories, "types": out}


# -- Table 7: accuracy given stability ----------------------------------------------------------------------


def accuracy_given_stability(group: Sequence[Sample], modalities: Sequence[str]) -> dict:
    """Orig accuracy of the stable samples of each stability type (Table 7).

    Over the samples whose orig correctness is defined: ``baseline`` = their accuracy. Per type, over
    those of them that have every modality it needs: ``prevalence`` = share stable, ``acc_stable`` =
    P(correct | stable), ``acc_unstable`` = P(correct | not stable), ``acc`` = P(correct) on the same
    samples and ``lift`` = acc_stable - acc.
    """
    judged = [s for s in group if s.correct is not None]
    out = {"baseline": _share([s.correct for s in judged]), "n_samples": len(judged), "types": {}}
    for name, needs in stability_types(modalities).items():
        pairs = [(s.stable(needs), s.correct) for s in judged] if needs else []
        pairs = [(st, ok) for st, ok in pairs if st is not None]
        stable = [ok for st, ok in pairs if st]
        unstable = [ok for st, ok in pairs if not st]
        acc, acc_stable = _share([ok for _, ok in pairs]), _share(stable)
        out["types"][name] = {
            "prevalence": _share([st for st, _ in pairs]), "acc_stable": acc_stable,
            "acc_unstable": _share(unstable), "acc": acc,
            "lift": None if acc_stable is None else acc_stable - acc,
            "n_samples": len(pairs), "n_stable": len(stable),
        }
    return out


# -- Table 8: correlations ------------------------------------------------------------------------------------


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """r = sum (x - mean x)(y - mean y) / sqrt(sum (x - mean x)^2 sum (y - mean y)^2); None when n < 2 or
    either variable is constant.

    On two 0/1 indicators r is the phi coefficient (= Matthews correlation); on an indicator and a
    continuous variable it is the point-biserial correlation.

    >>> pearson([1, 1, 0, 0], [1, 0, 0, 0])  # phi = (1*2 - 1*0) / sqrt(2*2*1*3)
    0.5773502691896258
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two 1-D sequences of one length, got shapes {a.shape} and {b.shape}")
    if a.size < 2:
        return None
    da, db = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(da @ da) * float(db @ db))
    if denom == 0.0:
        return None
    return max(-1.0, min(1.0, float(da @ db) / denom))


def correlation_table(group: Sequence[Sample], modalities: Sequence[str]) -> dict:
    """Pearson correlations over samples of the stability indicators (1 = stable) of each modality and the
    orig confidence (Table 8; phrasing, visual, language, confidence), each pair over the samples where
    both are defined (``n``).

    Pearson because it is the phi coefficient between two indicators (the Matthews correlation of
    Table 6) and the point-biserial correlation between an indicator and the confidence, so every cell
    is the usual linear correlation of its kind of pair.
    """
    variables = [m for m in TABLE7_TYPES if m in modalities] + ["confidence"]

    def column(name: str) -> list[float | None]:
        if name == "confidence":
            return [s.confidence for s in group]  # None on open-answer rows
        return [None if s.stable((name,)) is None else float(s.stable((name,))) for s in group]

    cols = {v: column(v) for v in variables}
    matrix, counts = [], []
    for a in variables:
        row, nrow = [], []
        for b in variables:
            pairs = [(x, y) for x, y in zip(cols[a], cols[b]) if x is not None and y is not None]
            row.append(pearson([p[0] for p in pairs], [p[1] for p in pairs]))
            nrow.append(len(pairs))
        matrix.append(row)
        counts.append(nrow)
    return {"method": "pearson", "variables": variables, "matrix": matrix, "n": counts}


# -- Sec. 5.2.1: the conditional mutual information ratio -----------------------------------------------------


def _no_pair(n: int) -> dict:
    return {"levels": None, "n_samples": n, "mi": None, "cmi": None, "ratio": None, "mi_ci": None, "cmi_ci": None,
            "ratio_ci": None, "plugin": {"mi": None, "cmi": None, "ratio": None}, "readable": False,
            "unreadable": f"{n} sample(s) have both entropies and a confidence: too few", "sensitivity": {}}


def cmi_table(group: Sequence[Sample], modalities: Sequence[str], *, levels: int | None = None,
              level_sensitivity: Sequence[int] = LEVEL_SENSITIVITY, binning: str = "quantile", seed: int = 0) -> dict:
    """The ratio I(H_V; H_T | C) / I(H_V; H_T) for each textual modality T (phrasing, language) present with
    visual, over the samples having both and a confidence: the chance-adjusted estimate with its interval at
    ``levels`` (None: ``metrics.information.auto_levels``) and, under ``sensitivity``, at each of
    ``level_sensitivity`` (``metrics.information.cmi_ratio``, resampled with the keys dataset, T, levels)."""
    out: dict[str, Any] = {"estimator": "chance-adjusted", "binning": binning,
                           "levels": "auto" if levels is None else levels, "pairs": {}}
    if "visual" not in modalities:
        return out
    for t in (m for m in modalities if m != "visual"):
        both = [s for s in group if "visual" in s.entropy and t in s.entropy and s.confidence is not None]
        if len(both) < 2:
            out["pairs"][t] = _no_pair(len(both))
            continue
        h_v, h_t, conf = ([s.entropy["visual"] for s in both], [s.entropy[t] for s in both],
                          [s.confidence for s in both])
        runs: dict[int, dict] = {}
        for n_levels in (levels or auto_levels(len(both)), *level_sensitivity):
            if n_levels not in runs:
                runs[n_levels] = cmi_ratio(h_v, h_t, conf, levels=n_levels, binning=binning, seed=seed,
                                           keys=(both[0].dataset, t, n_levels))
        sensitivity = {str(n): {k: runs[n][k] for k in ("ratio", "ratio_ci", "readable")} for n in level_sensitivity}
        out["pairs"][t] = {**next(iter(runs.values())), "sensitivity": sensitivity}
    return out


# -- everything for one model -----------------------------------------------------------------------------------


def stability_analysis(records: Iterable[Any], modality_of: Mapping[str, str | None], *,
                       levels: int | None = None, level_sensitivity: Sequence[int] = LEVEL_SENSITIVITY,
                       binning: str = "quantile", seed: int = 0) -> dict:
    """Every one-model stability analysis, per dataset: ``{dataset: block}`` (JSON-ready, deterministic).

    Only datasets with a variant of some modality appear. A block holds ``n_samples`` (groups with an
    orig record), ``n_groups_without_orig``, ``modalities``, ``families`` (the families each modality
    counted) and ``families_not_counted`` (the dataset's other scored families, without a modality), the
    ``stable_shares`` and ``entropy_histogram`` of Fig. 3, ``by_category`` (Table 5),
    ``accuracy_given_stability`` (Table 7), ``correlations`` (Table 8) and ``cmi`` (Sec. 5.2.1).
    Undefined numbers are None. ``modality_of`` maps a family to its modality (``families.modalities()``).
    """
    if binning not in BINNINGS:
        raise ValueError(f"binning must be one of {', '.join(BINNINGS)}, got {binning!r}")
    modality_of = dict(modality_of)
    records = parse_records(records)
    all_samples = samples(records, modality_of)
    groups_by_dataset: dict[str, set] = defaultdict(set)
    for r in records:
        groups_by_dataset[r.dataset].add(r.group_id)
    out = {}
    for dataset in sorted(groups_by_dataset):
        group = [s for s in all_samples if s.dataset == dataset]
        modalities = present_modalities(group)
        if not modalities:
            continue
        scored = {r.family for r in records if r.dataset == dataset and not r.is_orig}
        families = {m: sorted(f for f in scored if modality_of.get(f) == m) for m in modalities}
        out[dataset] = {
            "n_samples": len(group),
            "n_groups_without_orig": len(groups_by_dataset[dataset]) - len(group),
            "modalities": list(modalities),
            "families": families,
            "families_not_counted": sorted(f for f in scored if modality_of.get(f) is None),
            "stable_shares": stable_shares(group, modalities),
            "entropy_histogram": entropy_histogram(group, modalities),
            "by_category": category_table(group, modality_of),
            "accuracy_given_stability": accuracy_given_stability(group, modalities),
            "correlations": correlation_table(group, modalities),
            "cmi": cmi_table(group, modalities, levels=levels, level_sensitivity=level_sensitivity, binning=binning,
                             seed=seed),
        }
    return out
