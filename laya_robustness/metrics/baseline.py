"""Comparison with a baseline run: paired differences on the same rows, McNemar tests, the regression check.

The current records and the baseline's (``--baseline``: the predictions of the last release) are
matched row by row: the same ``(dataset, row_id)``, whose ids name the family and variant, so a
pair is the same question under the same perturbation. Per (family, dataset) and per family over
all its datasets (``"all"``):

- ``acc_diff`` = (1/G) sum_g (acc_g(current) - acc_g(baseline)) over the G groups with matched scored rows,
  with its 95% cluster-bootstrap interval ``acc_diff_ci`` and standard error ``acc_diff_se``
  (clusters resampled together across both runs: the comparison is paired);
- ``mcnemar_acc``: over matched scored rows, b = right in the baseline and wrong now, c = the reverse,
  p = the exact two-sided McNemar p-value, min(1, 2 P(X <= min(b, c))) with X ~ Binomial(b + c, 1/2);
- ``mcnemar_flip``: the same with "flipped against the run's own orig answer" in place of "right";
- in the cells of a meaning-preserving family (kind ``invariance``: its answer should not change),
  ``flip_diff`` = (1/G) sum_g (flip_g(current) - flip_g(baseline)), flip_g the share of the group's rows
  whose answer differs from that run's own orig answer, with ``flip_diff_ci`` and ``flip_diff_se``
  from the same paired cluster bootstrap.

A family "regresses" when ``acc_diff`` of its "all" cell lies below ``-max_regression``, or (an
invariance family) when ``flip_diff`` lies above ``max_flip_regression`` (judged like every limit: on
its interval by default, see ``laya_robustness.gate.judgement``).

>>> round(mcnemar_p(1, 9), 4)
0.0215
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.answers import answer_of, is_correct, is_scored
from laya_robustness.metrics.accuracy import group_key, orig_by_group
from laya_robustness.metrics.bootstrap import cluster_index, mean_ci, mean_se, resample_counts

ALL = "all"


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for b and c discordant pairs (1.0 without any)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def match(records: Iterable[Mapping[str, Any]], baseline: Iterable[Mapping[str, Any]]) -> list[tuple[Any, Any]]:
    """(current, baseline) record pairs with the same (dataset, row_id), in the current order."""
    by_id = {(r["dataset"], r["row_id"]): r for r in baseline}
    return [(r, by_id[(r["dataset"], r["row_id"])]) for r in records if (r["dataset"], r["row_id"]) in by_id]


def _mcnemar(pairs: Sequence[tuple[bool, bool]]) -> dict:
    b = sum(1 for now, before in pairs if before and not now)
    c = sum(1 for now, before in pairs if now and not before)
    return {"n_pairs": len(pairs), "b": b, "c": c, "p": mcnemar_p(b, c)}


def _paired_means(items: Sequence[tuple[Mapping[str, Any], bool, bool]], key: str, dataset: str, seed: int,
                  n_boot: int) -> dict:
    """Over ``(record, now, before)`` items: the mean over groups of (current - baseline) group means, with its
    paired cluster-bootstrap 95% interval and SE."""
    per_group: dict = defaultdict(lambda: [[], []])
    cluster_of: dict = {}
    for r, now, before in items:
        g = group_key(r)
        per_group[g][0].append(now)
        per_group[g][1].append(before)
        cluster_of[g] = f"{r['dataset']}/{r['cluster']}"
    diffs = {g: sum(a) / len(a) - sum(b) / len(b) for g, (a, b) in per_group.items()}
    clusters = cluster_index(cluster_of.values())
    ids, values = [clusters[cluster_of[g]] for g in diffs], list(diffs.values())
    if not values:
        return {"diff": None, "ci": None, "se": None, "n_groups": 0}
    counts = resample_counts(seed, key, dataset, len(clusters), n_boot)
    return {"diff": sum(values) / len(values), "ci": mean_ci(counts, ids, values), "se": mean_se(counts, ids, values),
            "n_groups": len(values)}


def _cell(pairs, orig_now, orig_before, family: str, dataset: str, seed: int, n_boot: int,
          flips_apply: bool = False) -> dict:
    scored = [(r, s) for r, s in pairs if is_scored(r) and is_scored(s)]
    acc = _paired_means([(r, is_correct(r), is_correct(s)) for r, s in scored], "baseline/" + family, dataset,
                        seed, n_boot)

    def flipped(r, orig):
        o = orig.get(group_key(r))
        return o is not None and answer_of(r) != answer_of(o)

    comparable = [(r, s) for r, s in pairs if r["family"] != "orig"
                  and group_key(r) in orig_now and group_key(s) in orig_before]
    flips = [(flipped(r, orig_now), flipped(s, orig_before)) for r, s in comparable]
    out = {
        "n_matched": len(pairs),
        "n_groups": acc["n_groups"],
        "acc": _group_mean(scored, 0), "acc_baseline": _group_mean(scored, 1),
        "acc_diff": acc["diff"], "acc_diff_ci": acc["ci"], "acc_diff_se": acc["se"],
        "mcnemar_acc": _mcnemar([(is_correct(r), is_correct(s)) for r, s in scored]),
        "mcnemar_flip": _mcnemar(flips),
    }
    if flips_apply:
        flip = _paired_means([(r, now, before) for (r, _), (now, before) in zip(comparable, flips)],
                             "baseline-flip/" + family, dataset, seed, n_boot)
        out.update({"n_flip_groups": flip["n_groups"], "flip_diff": flip["diff"], "flip_diff_ci": flip["ci"],
                    "flip_diff_se": flip["se"]})
    return out


def _group_mean(pairs, side: int) -> float | None:
    per_group: dict = defaultdict(list)
    for pair in pairs:
        per_group[group_key(pair[side])].append(is_correct(pair[side]))
    return sum(sum(v) / len(v) for v in per_group.values()) / len(per_group) if per_group else None


def baseline_block(records: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], *,
                   flip_families: Iterable[str] = (), seed: int = 0, n_boot: int = 1000) -> dict:
    """``{family: {dataset | "all": cell}}`` over the families both runs scored (see the module doc); the cells
    of ``flip_families`` (the meaning-preserving ones) also hold the flip-rate change."""
    invariance = set(flip_families)
    orig_now = orig_by_group(r for r in records if r["family"] == "orig")
    orig_before = orig_by_group(r for r in baseline if r["family"] == "orig")
    by_cell: dict = defaultdict(list)
    for r, s in match(records, baseline):
        by_cell[(r["family"], r["dataset"])].append((r, s))
    out: dict = {}
    for (family, dataset), pairs in sorted(by_cell.items()):
        out.setdefault(family, {})[dataset] = _cell(pairs, orig_now, orig_before, family, dataset, seed, n_boot,
                                                    family in invariance)
    for family in out:
        pooled = [p for (f, _), pairs in sorted(by_cell.items()) if f == family for p in pairs]
        out[family][ALL] = _cell(pooled, orig_now, orig_before, family, ALL, seed, n_boot, family in invariance)
    return out
