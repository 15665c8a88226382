"""Block metrics of the extension families, read from prediction records: one function per family cell.

A record is a prediction record (``row_id, group_id, cluster, dataset, family, variant,
primitive, label, logits, probs, argmax``) with ``meta`` (the row's meta). Logits and probs are
in the label order of that row's options. A variant is paired with the unperturbed record
(family "orig") of its group ``(dataset, group_id)``; a variant without one is left out of
every paired metric. ``p`` are the calibrated ``probs``, ``a`` the argmax, ``o`` the orig record.
P_yes is ``probs[1]`` (a noul row's options are ("no", "yes")); p_max is ``max(probs)``.

option_set_cell, per variant (add_distractor, drop_wrong):
  acc        group-weighted accuracy (metrics.accuracy.group_accuracy; label -1 left out)
  delta_acc  paired: mean over groups of acc_g(variant) - acc_g(orig)
  flip_rate  mean [m(a) != a_o] over the n_comparable rows whose orig answer a_o is still offered
             (n_flipped of them flip),
             m = the index map from meta (kept, or source_options with None for the distractor)
  logit_diff_shift  mean over rows of mean over pairs i < j of original options present in both
             |(z_m^-1(i) - z_m^-1(j)) - (z_o,i - z_o,j)|   (raw logits)
  distractor_pick_rate (add_distractor)  mean [a == meta.distractor_index]
abstain_cell:
  drop_gold  p_max_mean = mean p_max; p_max_above_0.5 / _0.8 = mean [p_max > 0.5] / [p_max > 0.8]
  add_none, add_none_shuffled  none_pick_rate = mean [a == meta.none_index]
form_choice_cell:
  noul_to_choice  over the n_paired as_choice rows with an orig row: mean_abs_delta_p_yes = mean |P_yes(o) - P_yes(as_choice)|; argmax_agreement = mean [a == a_o]
  choice_to_noul  over the n_groups groups with all k rows as_noul_0..k-1 and an orig row:
                  argmax_agreement = mean [argmax_i P_yes(as_noul_i) == a_o] (ties: the lowest i);
                  exactly_one_yes = mean [#{i : a(as_noul_i) = yes} == 1]
negation_cell (both variants together, and per variant):
  s = P_yes(o) + P_yes(not o); complement_sum_mean / _min / _max over paired rows;
  complement_outside = mean [s < 0.9 or s > 1.1]; acc (group-weighted, label flipped);
  not_opposite_rate = mean [a != 1 - a_o]
injection_cell (inject_text, inject_image: acc and delta_acc over the family, then per variant):
  asr = mean [a == t] over paired rows with a_o != t (n_attackable of them), t = meta.target
  delta_p_target = mean (p_t - p_o,t) over every paired row

Every mean is over rows (each group has at most one row per variant) and None when it has
no row; a probability- or logit-based mean (p_max, P_yes, logit_diff_shift, delta_p_target) is over the rows that
have them, so it is None for a generation-only scorer (a served model without probabilities); n_rows counts a
cell's (or variant's) rows. The caller passes the cell's records in the
summary's canonical order and ``orig``, the orig record of every group (metrics.accuracy.orig_by_group).

>>> orig = dict(row_id="d/1", group_id="d/1", cluster="c", dataset="d", family="orig", variant="orig",
...             primitive="noul", label=1, logits=[0.0, 1.0], probs=[0.3, 0.7], argmax=1, meta={})
>>> neg = dict(orig, row_id="d/1|negation|neg_false", family="negation", variant="neg_false",
...            label=0, probs=[0.4, 0.6], meta={"negated": True})
>>> round(negation_cell([neg], {("d", "d/1"): orig})["complement_sum_mean"], 6)
1.3
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.metrics.accuracy import GroupKey, group_accuracy, group_key, paired_delta
from laya_robustness.metrics.headline import index_map, mapped_answer

Record = Mapping[str, Any]
Orig = Mapping[GroupKey, Record]
YES = 1
COMPLEMENT_BAND = (0.9, 1.1)


def _mean(values: Iterable[float]) -> float | None:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None


def _meta(record: Record, key: str) -> Any:
    try:
        return record["meta"][key]
    except KeyError:
        raise ValueError(f"{record['row_id']}: meta lacks {key!r} (needed by {record['family']})") from None


def _paired(rows: Sequence[Record], orig: Orig) -> list[tuple[Record, Record]]:
    return [(r, orig[group_key(r)]) for r in rows if group_key(r) in orig]


def _with_probs(pairs: Sequence[tuple[Record, Record]]) -> list[tuple[Record, Record]]:
    """The pairs whose two records both have probabilities (none of a generation-only scorer's do)."""
    return [(r, o) for r, o in pairs if r["probs"] and o["probs"]]


def _by_variant(rows: Sequence[Record]) -> dict[str, list[Record]]:
    """variant -> its rows, variants in sorted order."""
    out: dict[str, list[Record]] = defaultdict(list)
    for r in rows:
        out[r["variant"]].append(r)
    return {v: out[v] for v in sorted(out)}


def _acc_cell(rows: Sequence[Record], orig: Orig) -> dict:
    origs = [o for _, o in _paired(rows, orig)]
    return {"n_rows": len(rows), "acc": group_accuracy(rows), "delta_acc": paired_delta(rows, origs)}


# --- options: option_set and abstain ----------------------------------------------------------


def _logit_shift(record: Record, o: Record, mapping: Sequence[int | None]) -> float | None:
    """Mean |change| of z_i - z_j over the pairs of original options present in both rows."""
    pos = {i: j for j, i in enumerate(mapping) if i is not None}
    z, z0 = record["logits"], o["logits"]
    if not z or not z0:
        return None  # a generation-only scorer's records have no logits
    if any(not 0 <= i < len(z0) for i in pos):
        raise ValueError(f"{record['row_id']}: meta maps to an option the orig row does not have: {mapping}")
    shifts = [abs((z[pos[a]] - z[pos[b]]) - (z0[a] - z0[b])) for a, b in combinations(sorted(pos), 2)]
    return _mean(shifts)


def _option_set_variant(variant: str, rows: list[Record], orig: Orig) -> dict:
    flips, shifts = [], []
    for r, o in _paired(rows, orig):
        mapping = index_map(r)
        if o["argmax"] in mapping:
            flips.append(mapped_answer(r, mapping) != o["argmax"])
        shift = _logit_shift(r, o, mapping)
        if shift is not None:
            shifts.append(shift)
    cell = {**_acc_cell(rows, orig), "n_comparable": len(flips), "n_flipped": sum(flips),
            "flip_rate": _mean(flips), "logit_diff_shift": _mean(shifts)}
    if variant == "add_distractor":
        cell["distractor_pick_rate"] = _mean(r["argmax"] == _meta(r, "distractor_index") for r in rows)
    return cell


def option_set_cell(rows: Sequence[Record], orig: Orig, boot: Mapping[str, int] | None = None) -> dict:
    """``{"n_rows", "variants": {variant: metrics}}`` of one option_set cell (see the module doc)."""
    variants = {v: _option_set_variant(v, vr, orig) for v, vr in _by_variant(rows).items()}
    return {"n_rows": len(rows), "variants": variants}


def _p_max_cell(rows: Sequence[Record]) -> dict:
    p_max = [max(r["probs"]) for r in rows if r["probs"]]
    return {
        "n_rows": len(rows),
        "p_max_mean": _mean(p_max),
        "p_max_above_0.5": _mean(p > 0.5 for p in p_max),
        "p_max_above_0.8": _mean(p > 0.8 for p in p_max),
    }


def _abstain_variant(variant: str, rows: list[Record]) -> dict:
    if variant == "drop_gold":
        return _p_max_cell(rows)
    return {"n_rows": len(rows), "none_pick_rate": _mean(r["argmax"] == _meta(r, "none_index") for r in rows)}


def abstain_cell(rows: Sequence[Record], orig: Orig, boot: Mapping[str, int] | None = None) -> dict:
    """``{"n_rows", "variants": {variant: metrics}}`` of one abstain cell (see the module doc).

    >>> o = dict(row_id="d/1", group_id="d/1", cluster="c", dataset="d", family="orig", variant="orig",
    ...          primitive="choice", label=0, logits=[2.0, 1.0, 0.0], probs=[0.6, 0.3, 0.1], argmax=0, meta={})
    >>> v = dict(o, row_id="d/1|abstain|add_none", family="abstain", variant="add_none",
    ...          logits=[0.0, 0.0, 0.0, 3.0], probs=[0.1, 0.1, 0.1, 0.7], argmax=3, meta={"none_index": 3})
    >>> abstain_cell([v], {("d", "d/1"): o})["variants"]["add_none"]
    {'n_rows': 1, 'none_pick_rate': 1.0}
    """
    return {"n_rows": len(rows), "variants": {v: _abstain_variant(v, vr) for v, vr in _by_variant(rows).items()}}


# --- form: form_choice and negation -----------------------------------------------------------


def _noul_to_choice(rows: Sequence[Record], orig: Orig) -> dict:
    pairs = _paired(rows, orig)
    return {
        "n_paired": len(pairs),
        "mean_abs_delta_p_yes": _mean(abs(o["probs"][YES] - r["probs"][YES]) for r, o in _with_probs(pairs)),
        "argmax_agreement": _mean(r["argmax"] == o["argmax"] for r, o in pairs),
    }


def _complete_splits(rows: Sequence[Record]) -> dict[GroupKey, list[Record]]:
    """group -> its as_noul rows in option order, for groups that have all k of them."""
    by_group: dict[GroupKey, dict[int, Record]] = defaultdict(dict)
    for r in rows:
        by_group[group_key(r)][int(_meta(r, "source_option"))] = r
    out = {}
    for g, parts in sorted(by_group.items()):
        k = int(_meta(next(iter(parts.values())), "k"))
        if sorted(parts) == list(range(k)):
            out[g] = [parts[i] for i in range(k)]
    return out


def _choice_to_noul(rows: Sequence[Record], orig: Orig) -> dict:
    agree, one_yes = [], []
    for g, parts in _complete_splits(rows).items():
        if g in orig:
            if all(r["probs"] for r in parts):
                p_yes = [r["probs"][YES] for r in parts]
                agree.append(p_yes.index(max(p_yes)) == orig[g]["argmax"])
            one_yes.append(sum(r["argmax"] == YES for r in parts) == 1)
    return {"n_groups": len(one_yes), "argmax_agreement": _mean(agree), "exactly_one_yes": _mean(one_yes)}


def form_choice_cell(rows: Sequence[Record], orig: Orig, boot: Mapping[str, int] | None = None) -> dict:
    """``{"n_rows", "noul_to_choice", "choice_to_noul"}`` of one form_choice cell (each part where it applies)."""
    as_choice = [r for r in rows if r["variant"] == "as_choice"]
    as_noul = [r for r in rows if r["variant"].startswith("as_noul_")]
    out: dict[str, Any] = {"n_rows": len(rows)}
    if as_choice:
        out["noul_to_choice"] = _noul_to_choice(as_choice, orig)
    if as_noul:
        out["choice_to_noul"] = _choice_to_noul(as_noul, orig)
    return out


def _negation_stats(rows: Sequence[Record], orig: Orig) -> dict:
    pairs = _paired(rows, orig)
    sums = [o["probs"][YES] + r["probs"][YES] for r, o in _with_probs(pairs)]
    low, high = COMPLEMENT_BAND
    return {
        "n_rows": len(rows),
        "acc": group_accuracy(rows),
        "complement_sum_mean": _mean(sums),
        "complement_sum_min": min(sums) if sums else None,
        "complement_sum_max": max(sums) if sums else None,
        "complement_outside": _mean(s < low or s > high for s in sums),
        "not_opposite_rate": _mean(r["argmax"] != 1 - o["argmax"] for r, o in pairs),
    }


def negation_cell(rows: Sequence[Record], orig: Orig, boot: Mapping[str, int] | None = None) -> dict:
    """The negation metrics over both variants together and, under "variants", per variant."""
    variants = {v: _negation_stats(vr, orig) for v, vr in _by_variant(rows).items()}
    return {**_negation_stats(rows, orig), "variants": variants}


# --- injection: inject_text and inject_image --------------------------------------------------


def _attack(rows: Sequence[Record], orig: Orig) -> dict:
    pairs = _paired(rows, orig)
    targets = [(r, o, int(_meta(r, "target"))) for r, o in pairs]
    attackable = [(r, t) for r, o, t in targets if o["argmax"] != t]
    return {
        **_acc_cell(rows, orig),
        "n_attackable": len(attackable),
        "asr": _mean(r["argmax"] == t for r, t in attackable),
        "delta_p_target": _mean(r["probs"][t] - o["probs"][t] for r, o, t in targets if r["probs"] and o["probs"]),
    }


def injection_cell(rows: Sequence[Record], orig: Orig, boot: Mapping[str, int] | None = None) -> dict:
    """``{"n_rows", "acc", "delta_acc", "variants": {variant: attack metrics}}`` of one injection cell.

    Per variant: n_rows, acc, delta_acc, n_attackable, asr (attack success rate), delta_p_target.
    """
    variants = {v: _attack(vr, orig) for v, vr in _by_variant(rows).items()}
    return {**_acc_cell(rows, orig), "variants": variants}
