"""Stability across models, from the prediction files of two or more models on the same rows: the Matthews
correlation of per-sample stability (the stability paper's Table 6) and a linear predictor of one model's
correctness from another model's stability (Fig. 6), reported as recall at a fixed precision next to the
target model's own confidence.

>>> matthews([1, 1, 0, 0], [1, 0, 0, 0])  # (1*2 - 0*1) / sqrt(1*2*3*2)
0.5773502691896258
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from laya_robustness.metrics.stability_analysis import MODALITIES, Sample, samples
from laya_robustness.records import parse_records
from laya_robustness.rng import keyed_rng

#: The precision at which the predictor's recall is read (the paper's 92%).
PRECISION = 0.92
#: Share of the samples held out to test the predictor (the paper's 75/25 split).
TEST_SHARE = 0.25
#: The key of the results pooled over every dataset.
POOLED = "(all datasets)"
#: The fields two files must agree on for every row.
ROW_FIELDS = ("group_id", "family", "variant", "label")


def check_same_rows(named_records: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Raise ValueError unless every file holds the same rows: the same (dataset, row_id) set, and per row
    the same group, family, variant and label. The message names the files and what differs."""
    names = list(named_records)
    if len(names) < 2:
        return
    keyed = {}
    for name in names:
        rows = {}
        for r in named_records[name]:
            rows[(r["dataset"], r["row_id"])] = tuple(r[f] for f in ROW_FIELDS)
        keyed[name] = rows
    first = names[0]
    problems = []
    for other in names[1:]:
        a, b = keyed[first], keyed[other]
        lacks = sorted(set(a) - set(b))
        extra = sorted(set(b) - set(a))
        if lacks:
            problems.append(f"{other} lacks {len(lacks)} row(s) of {first} (e.g. "
                            f"{', '.join(r for _, r in lacks[:3])})")
        if extra:
            problems.append(f"{other} has {len(extra)} row(s) {first} lacks (e.g. "
                            f"{', '.join(r for _, r in extra[:3])})")
        for key in sorted(set(a) & set(b)):
            if a[key] != b[key]:
                field = next(f for f, x, y in zip(ROW_FIELDS, a[key], b[key]) if x != y)
                i = ROW_FIELDS.index(field)
                problems.append(f"row {key[1]} ({key[0]}): {field} is {a[key][i]!r} in {first}, "
                                f"{b[key][i]!r} in {other}")
                break
    if problems:
        raise ValueError("the prediction files do not hold the same rows: " + "; ".join(problems))


def studied_records(named_records: Mapping[str, Sequence[Any]], modality_of: Mapping[str, str | None]) -> dict:
    """Each file's records of the datasets the study covers: those with a variant of a family that has a
    modality in any file. The others (caption sets probed by a dual encoder, sets run only through
    controls) take no part, so one model's run may hold them and another's not."""
    studied = {r["dataset"] for recs in named_records.values() for r in recs if modality_of.get(r["family"])}
    return {name: [r for r in recs if r["dataset"] in studied] for name, recs in named_records.items()}


# -- Table 6: Matthews correlation of stability ------------------------------------------------------------------


def matthews(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """MCC = (TP TN - FP FN) / sqrt((TP + FP)(TP + FN)(TN + FP)(TN + FN)) of two 0/1 sequences (a as the
    truth, b as the prediction; the value is symmetric). None when a factor is 0, i.e. one sequence is
    constant (scikit-learn's ``matthews_corrcoef`` returns 0.0 there)."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"need two 1-D sequences of one length, got shapes {x.shape} and {y.shape}")
    tp, tn = int(np.sum(x & y)), int(np.sum(~x & ~y))
    fp, fn = int(np.sum(~x & y)), int(np.sum(x & ~y))
    denom = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denom == 0:
        return None
    return (tp * tn - fp * fn) / math.sqrt(denom)


def mcc_matrix(per_model: Mapping[str, Mapping[tuple[str, str], Sample]], modality: str) -> dict:
    """Matthews correlation of the per-sample stability under ``modality`` between every two models, each pair
    over the samples both have a variant of it for (``n``)."""
    names = list(per_model)
    matrix, counts = [], []
    for a in names:
        row, nrow = [], []
        for b in names:
            keys = [k for k, s in per_model[a].items() if s.stable((modality,)) is not None
                    and k in per_model[b] and per_model[b][k].stable((modality,)) is not None]
            row.append(matthews([per_model[a][k].stable((modality,)) for k in keys],
                                [per_model[b][k].stable((modality,)) for k in keys]))
            nrow.append(len(keys))
        matrix.append(row)
        counts.append(nrow)
    return {"models": names, "matrix": matrix, "n": counts}


# -- Fig. 6: precision and recall ------------------------------------------------------------------------------


def precision_recall_points(scores: Sequence[float], positive: Sequence[bool]) -> list[tuple[float, float, float]]:
    """(threshold, precision, recall) for every distinct score t, highest first, predicting positive when
    score >= t: precision = TP / (TP + FP), recall = TP / P (P = number of positives, > 0 required).

    >>> precision_recall_points([0.9, 0.8, 0.8, 0.1], [True, False, True, False])
    [(0.9, 1.0, 0.5), (0.8, 0.6666666666666666, 1.0), (0.1, 0.5, 1.0)]
    """
    s, y = np.asarray(scores, dtype=float), np.asarray(positive, dtype=bool)
    if s.shape != y.shape or s.ndim != 1 or s.size == 0:
        raise ValueError(f"need one label per score, got shapes {s.shape} and {y.shape}")
    if not y.any():
        raise ValueError("precision and recall need at least one positive")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    tp, fp = np.cumsum(y), np.cumsum(~y)
    last = np.r_[s[1:] != s[:-1], True]  # the last index of each run of equal scores
    return [(float(t), int(a) / int(a + b), int(a) / int(y.sum())) for t, a, b in zip(s[last], tp[last], fp[last])]


def recall_at_precision(scores: Sequence[float], positive: Sequence[bool], precision: float = PRECISION) -> dict:
    """The largest recall over the thresholds whose precision is >= ``precision`` (``recall``, ``threshold``),
    or None for both when no threshold reaches it; ``best_precision`` is the highest precision reached.

    >>> recall_at_precision([0.9, 0.8, 0.8, 0.1], [True, False, True, False], 0.6)
    {'recall': 1.0, 'threshold': 0.8, 'best_precision': 1.0}
    """
    points = precision_recall_points(scores, positive)
    ok = [(r, t) for t, p, r in points if p >= precision - 1e-12]
    best = max(ok, key=lambda rt: (rt[0], rt[1])) if ok else (None, None)
    return {"recall": best[0], "threshold": best[1], "best_precision": max(p for _, p, _ in points)}


def precision_at_recall(scores: Sequence[float], positive: Sequence[bool], recall: float) -> float | None:
    """The highest precision over the thresholds whose recall is >= ``recall`` (None if ``recall`` is None)."""
    if recall is None:
        return None
    return max(p for _, p, r in precision_recall_points(scores, positive) if r >= recall - 1e-12)


# -- Fig. 6: the correctness predictor --------------------------------------------------------------------------


def feature_names(source: Mapping[tuple[str, str], Sample], keys: Sequence[tuple[str, str]],
                  with_entropy: bool = False) -> list[str]:
    """The predictor's features: ``stable:<family>`` for every family the samples of ``keys`` all have
    variants of, then, ``with_entropy``, ``entropy:<modality>`` for every modality they all have."""
    if not keys:
        return []
    families = sorted(set.intersection(*(set(source[k].family_stable) for k in keys)))
    names = [f"stable:{f}" for f in families]
    if with_entropy:
        names += [f"entropy:{m}" for m in MODALITIES if all(m in source[k].entropy for k in keys)]
    return names


def stability_features(source: Mapping[tuple[str, str], Sample], keys: Sequence[tuple[str, str]],
                       names: Sequence[str]) -> np.ndarray:
    """A (len(keys), len(names)) matrix: ``stable:<family>`` is 1.0 when the sample is stable under the
    family (every answer of its variants equals the orig answer), else 0.0; ``entropy:<modality>`` is the
    sample's answer entropy of that modality (nats)."""
    def value(sample: Sample, name: str) -> float:
        kind, _, what = name.partition(":")
        return float(sample.family_stable[what]) if kind == "stable" else sample.entropy[what]

    return np.asarray([[value(source[k], n) for n in names] for k in keys], dtype=float).reshape(len(keys), len(names))


def split(keys: Sequence[tuple[str, str]], seed: int, name: str, test_share: float = TEST_SHARE):
    """(train keys, test keys): the sorted keys permuted by ``keyed_rng(seed, "stability-predictor", name)``,
    the last round(test_share * n) of them held out."""
    ordered = sorted(keys)
    perm = keyed_rng(seed, "stability-predictor", name).permutation(len(ordered))
    n_test = int(round(test_share * len(ordered)))
    shuffled = [ordered[i] for i in perm]
    return shuffled[:len(ordered) - n_test], shuffled[len(ordered) - n_test:]


def correctness_predictor(source: Mapping[tuple[str, str], Sample], target: Mapping[tuple[str, str], Sample],
                          *, seed: int = 0, name: str = "", precision: float = PRECISION,
                          test_share: float = TEST_SHARE, with_entropy: bool = False) -> dict:
    """Predict the target model's orig correctness from the source model's stability features.

    Samples: those the target can be judged on and the source has variants of every family (of any sample)
    for; the others are counted in ``n_excluded``.
    A logistic regression (scikit-learn, L2, C = 1, lbfgs) is fit on the training split of
    :func:`split`; on the test split, its predicted probability of "correct" and the target's own
    confidence (its orig max prob; None when a test sample has none, as open-answer rows) are each read at
    ``precision``: the recall there, or None and the best precision reached.
    ``confidence_precision_at_predictor_recall`` is the confidence's precision at the predictor's recall.
    ``result`` is None with a ``reason`` when there is nothing to fit.
    """
    families = sorted({f for s in source.values() for f in s.family_stable})
    keys = [k for k in sorted(source) if k in target and target[k].correct is not None
            and all(f in source[k].family_stable for f in families)]
    names = feature_names(source, keys, with_entropy)
    out: dict[str, Any] = {"features": names,
                           "n_samples": len(keys), "n_excluded": len(source) - len(keys), "precision": precision}
    train, test = split(keys, seed, name, test_share)
    y_train = np.array([target[k].correct for k in train], dtype=bool)
    y_test = np.array([target[k].correct for k in test], dtype=bool)
    out.update(n_train=len(train), n_test=len(test),
               target_acc_test=float(y_test.mean()) if len(test) else None)
    reason = None
    if not names:
        reason = "the source model has no stability features"
    elif len(set(y_train.tolist())) < 2:
        reason = "the target's training answers are all right or all wrong"
    elif not y_test.any():
        reason = "the target answers no test sample right"
    if reason:
        return {**out, "result": None, "reason": reason}
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, solver="lbfgs", max_iter=1000)
    model.fit(stability_features(source, train, names), y_train)
    scores = model.predict_proba(stability_features(source, test, names))[:, 1]
    confidence = [target[k].confidence for k in test]
    predictor = recall_at_precision(scores, y_test, precision)
    has_confidence = None not in confidence
    return {**out, "reason": None, "result": {
        "predictor": predictor,
        "confidence": recall_at_precision(confidence, y_test, precision) if has_confidence else None,
        "confidence_precision_at_predictor_recall":
            precision_at_recall(confidence, y_test, predictor["recall"]) if has_confidence else None,
        "coefficients": dict(zip(names, (float(c) for c in model.coef_[0]))),
        "intercept": float(model.intercept_[0]),
    }}


def cross_model_analysis(named_records: Mapping[str, Sequence[Any]],
                         modality_of: Mapping[str, str | None], *, seed: int = 0,
                         precision: float = PRECISION, test_share: float = TEST_SHARE,
                         with_entropy: bool = False) -> dict:
    """Table 6 and Fig. 6 for two or more models' records of the same rows, per dataset and pooled.

    ``{"models": [...], "datasets": {dataset or POOLED: {"mcc": {modality: mcc_matrix},
    "predictors": [correctness_predictor of every ordered (source, target) pair]}}}``.
    """
    if len(named_records) < 2:
        raise ValueError(f"the cross-model analyses need two or more models, got {len(named_records)}")
    if not (0 < precision <= 1) or not (0 < test_share < 1):
        raise ValueError(f"precision must lie in (0, 1] and test_share in (0, 1), got {precision}, {test_share}")
    modality_of = dict(modality_of)
    parsed = {name: parse_records(recs, f"{name} record") for name, recs in named_records.items()}
    parsed = studied_records(parsed, modality_of)
    check_same_rows(parsed)
    per_model = {name: {s.key: s for s in samples(recs, modality_of)} for name, recs in parsed.items()}
    names = list(per_model)
    datasets = sorted({k[0] for k in per_model[names[0]]})
    out: dict[str, Any] = {"models": names, "seed": seed, "datasets": {}}
    for dataset in [*datasets, POOLED] if len(datasets) > 1 else datasets:
        subset = {n: {k: s for k, s in m.items() if dataset in (POOLED, k[0])} for n, m in per_model.items()}
        modalities = [m for m in MODALITIES if any(m in s.entropy for s in subset[names[0]].values())]
        if not modalities:
            continue
        out["datasets"][dataset] = {
            "mcc": {m: mcc_matrix(subset, m) for m in modalities},
            "predictors": [{"source": a, "target": b,
                            **correctness_predictor(subset[a], subset[b], seed=seed, name=dataset,
                                                    precision=precision, test_share=test_share,
                                                    with_entropy=with_entropy)}
                           for a in names for b in names if a != b],
        }
    return out
