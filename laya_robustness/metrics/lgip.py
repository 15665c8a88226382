"""LGIP metrics: invariance error, semantic sensitivity and positive rate of caption variants, with intervals.

Records are prediction records of caption rows (``family``, ``variant``, ``group_id``,
``cluster``, ``dataset``, ``logits``, ``meta``); a record's similarity is s = ``logits[0]``.
Each variant is paired with its reference: the group's unperturbed record (family ``orig``),
or for an ``lgip_combined`` flip the group's record whose variant is ``meta["reference"]``
(the paraphrase of the true caption). Over P paraphrase pairs (c, c') and F flip pairs (c, c†):

    E_inv  = (1/P) sum |s(I, c) - s(I, c')|          (lower is better)
    E_sens = (1/F) sum (s(I, c) - s(I, c†))          (higher is better)
    PR     = (1/F) sum [s(I, c) > s(I, c†)]          (a tie is not positive; 0.5 is chance)

Intervals are 95% percentile intervals of the same means under the cluster bootstrap
(``metrics.bootstrap``): images are resampled with every pair of their captions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from laya_robustness.metrics.bootstrap import cluster_index, mean_ci, resample_counts

#: The three probe families, whose variants the metrics pair with their references.
FAMILY_PARAPHRASE = "lgip_paraphrase"
FAMILY_FLIP = "lgip_flip"
FAMILY_COMBINED = "lgip_combined"
FAMILIES = (FAMILY_PARAPHRASE, FAMILY_FLIP, FAMILY_COMBINED)
#: What a flip changes, and how strongly it contradicts the image.
ATTRIBUTES = ("object", "colour", "count")
STRENGTHS = ("weak", "medium", "strong")
ORIG = "orig"
Record = Mapping[str, Any]
_FIELDS = ("family", "variant", "group_id", "cluster", "dataset", "logits")


@dataclass(frozen=True)
class Pair:
    """A variant's similarity with its reference's: the unit every LGIP mean averages over."""

    reference: float
    variant: float
    group: str
    cluster: str
    meta: Mapping[str, Any]


def _similarity(record: Record, i: int) -> float:
    logits = record["logits"]
    if not isinstance(logits, Sequence) or len(logits) != 1:
        raise ValueError(f"record {i} ({record.get('row_id', '?')}) is not a caption record: "
                         f"expected one logit, got {logits!r}")
    return float(logits[0])


def _checked(records: Iterable[Record]) -> list[Record]:
    out = list(records)
    for i, r in enumerate(out):
        if not isinstance(r, Mapping):
            raise TypeError(f"record {i} is a {type(r).__name__}, not a mapping")
        missing = [f for f in _FIELDS if f not in r]
        if missing:
            raise ValueError(f"record {i} ({r.get('row_id', '?')}) lacks field(s) {', '.join(missing)}")
        _similarity(r, i)
    return out


def lgip_pairs(records: Iterable[Record]) -> tuple[list[Pair], list[Pair]]:
    """(paraphrase pairs, flip pairs) of LGIP variant records, each with its reference.

    ``records`` holds the orig records of the dataset(s) and the variant records; a
    variant whose reference is missing is an error naming it.
    """
    records = _checked(records)
    orig = {(r["dataset"], r["group_id"]): r for r in records if r["family"] == ORIG}
    combined = {(r["dataset"], r["group_id"], r["variant"]): r for r in records if r["family"] == FAMILY_COMBINED}
    paraphrase_pairs, flip_pairs = [], []
    for r in records:
        family, meta = r["family"], r.get("meta") or {}
        if family == ORIG:
            continue
        if family not in FAMILIES:
            raise ValueError(f"record {r.get('row_id', '?')}: family {family!r} is not an LGIP family {FAMILIES}")
        is_flip = family == FAMILY_FLIP or (family == FAMILY_COMBINED and meta.get("role") == "flip")
        if family == FAMILY_COMBINED and is_flip:
            key = (r["dataset"], r["group_id"], meta.get("reference"))
            reference = combined.get(key)
        else:
            reference = orig.get((r["dataset"], r["group_id"]))
        if reference is None:
            wanted = f"variant {meta.get('reference')!r}" if family == FAMILY_COMBINED and is_flip else "the orig record"
            raise ValueError(f"record {r.get('row_id', '?')} ({r['dataset']}): its reference, {wanted} of group "
                             f"{r['group_id']}, is missing")
        pair = Pair(_similarity(reference, 0), _similarity(r, 0), str(r["group_id"]), str(r["cluster"]), meta)
        (flip_pairs if is_flip else paraphrase_pairs).append(pair)
    return paraphrase_pairs, flip_pairs


def invariance_error(pairs: Sequence[Pair]) -> float | None:
    """E_inv = (1/P) sum_p |s(I, c_p) - s(I, c'_p)|; None without pairs.

    >>> round(invariance_error([Pair(0.30, 0.25, "g", "i", {}), Pair(0.30, 0.40, "g", "i", {})]), 4)
    0.075
    """
    return float(np.mean([abs(p.reference - p.variant) for p in pairs])) if pairs else None


def semantic_sensitivity(pairs: Sequence[Pair]) -> float | None:
    """E_sens = (1/F) sum_f (s(I, c_f) - s(I, c†_f)); None without pairs.

    >>> round(semantic_sensitivity([Pair(0.30, 0.10, "g", "i", {}), Pair(0.30, 0.40, "g", "i", {})]), 4)
    0.05
    """
    return float(np.mean([p.reference - p.variant for p in pairs])) if pairs else None


def positive_rate(pairs: Sequence[Pair]) -> float | None:
    """PR = (1/F) sum_f [s(I, c_f) > s(I, c†_f)] (ties are not positive); None without pairs.

    >>> positive_rate([Pair(0.3, 0.1, "g", "i", {}), Pair(0.3, 0.3, "g", "i", {}), Pair(0.3, 0.4, "g", "i", {})])
    0.3333333333333333
    """
    return float(np.mean([p.reference > p.variant for p in pairs])) if pairs else None


def _ci(counts, clusters: Mapping[str, int], pairs: Sequence[Pair], values: Sequence[float]):
    return mean_ci(counts, [clusters[p.cluster] for p in pairs], values)


def _invariance_block(pairs: Sequence[Pair], counts, clusters) -> dict:
    return {"n_pairs": len(pairs), "n_groups": len({p.group for p in pairs}),
            "e_inv": invariance_error(pairs),
            "e_inv_ci": _ci(counts, clusters, pairs, [abs(p.reference - p.variant) for p in pairs])}


def _sensitivity_block(pairs: Sequence[Pair], counts, clusters) -> dict:
    return {"n_pairs": len(pairs), "n_groups": len({p.group for p in pairs}),
            "e_sens": semantic_sensitivity(pairs),
            "e_sens_ci": _ci(counts, clusters, pairs, [p.reference - p.variant for p in pairs]),
            "pr": positive_rate(pairs),
            "pr_ci": _ci(counts, clusters, pairs, [float(p.reference > p.variant) for p in pairs])}


def _by(pairs: Sequence[Pair], key: str, order: Sequence[str]) -> dict[str, list[Pair]]:
    """Pairs split by ``meta[key]``, keys in ``order`` first, then the rest sorted."""
    split: dict[str, list[Pair]] = {}
    for p in pairs:
        split.setdefault(str(p.meta.get(key)), []).append(p)
    return {k: split[k] for k in [*[o for o in order if o in split], *sorted(set(split) - set(order))]}


def lgip_cell(records: Iterable[Record], seed: int, n_boot: int) -> dict:
    """Every LGIP statistic of one (family, dataset) cell, with 95% cluster-bootstrap intervals.

    ``records``: the dataset's orig records and the variant records of one LGIP family.
    Returns ``family``, ``dataset``, ``n_clusters`` (images with a pair), ``n_groups``
    (captions with a pair), ``n_boot``, ``invariance`` (paraphrase pairs: ``n_pairs``,
    ``n_groups``, ``e_inv``, ``e_inv_ci``, ``by_kind``, ``by_rule``; None for ``lgip_flip``) and
    ``sensitivity`` (flip pairs: ``n_pairs``, ``n_groups``, ``e_sens``, ``e_sens_ci``, ``pr``,
    ``pr_ci``, ``by_attribute`` -> each with ``by_strength``; None for ``lgip_paraphrase``).
    The resamples come from ``resample_counts(seed, family, dataset, n_clusters, n_boot)``.
    """
    records = _checked(records)
    variants = [r for r in records if r["family"] != ORIG]
    families = sorted({r["family"] for r in variants})
    datasets = sorted({r["dataset"] for r in variants})
    if len(families) != 1 or len(datasets) != 1:
        raise ValueError(f"one LGIP cell needs the variants of one family and dataset, got families {families} "
                         f"and datasets {datasets}")
    family, dataset = families[0], datasets[0]
    paraphrase_pairs, flip_pairs = lgip_pairs([r for r in records if r["dataset"] == dataset])
    pairs = paraphrase_pairs + flip_pairs
    clusters = cluster_index(p.cluster for p in pairs)
    counts = resample_counts(seed, family, dataset, len(clusters), n_boot) if clusters else None
    cell = {"family": family, "dataset": dataset, "n_clusters": len(clusters),
            "n_groups": len({p.group for p in pairs}), "n_boot": n_boot, "invariance": None, "sensitivity": None}
    if paraphrase_pairs:
        cell["invariance"] = {
            **_invariance_block(paraphrase_pairs, counts, clusters),
            "by_kind": {k: _invariance_block(v, counts, clusters)
                        for k, v in _by(paraphrase_pairs, "kind", ("wrapper", "rewrite", "user")).items()},
            "by_rule": {k: _invariance_block(v, counts, clusters) for k, v in _by(paraphrase_pairs, "rule", ()).items()},
        }
    if flip_pairs:
        cell["sensitivity"] = {**_sensitivity_block(flip_pairs, counts, clusters), "by_attribute": {
            attribute: {**_sensitivity_block(attr_pairs, counts, clusters), "by_strength": {
                strength: _sensitivity_block(v, counts, clusters)
                for strength, v in _by(attr_pairs, "strength", STRENGTHS).items()}}
            for attribute, attr_pairs in _by(flip_pairs, "attribute", ATTRIBUTES).items()}}
    return cell


# -- the table ----------------------------------------------------------------------------------


def _value(value: float | None, ci: Sequence[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")


def _render(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def _inv_row(cell: Mapping, probe: str, block: Mapping) -> list[str]:
    return [cell["dataset"], cell["family"], probe, str(block["n_pairs"]), _value(block["e_inv"], block["e_inv_ci"]),
            "-", "-"]


def _sens_row(cell: Mapping, probe: str, block: Mapping) -> list[str]:
    return [cell["dataset"], cell["family"], probe, str(block["n_pairs"]), "-",
            _value(block["e_sens"], block["e_sens_ci"]), _value(block["pr"], block["pr_ci"])]


def format_lgip_table(cells: Sequence[Mapping]) -> str:
    """The LGIP table in the paper's layout: one row per probe, columns pairs, E_inv, E_sens and PR,
    each with its 95% interval ("-": not measured by that probe).

    Per cell (dataset, family): ``paraphrases`` (E_inv) and each paraphrase kind (wrapper /
    rewrite / user), then ``flips`` (E_sens, PR), each attribute and each attribute / strength.
    """
    rows = [["dataset", "family", "probe", "pairs", "E_inv [95% CI]", "E_sens [95% CI]", "PR [95% CI]"]]
    for cell in cells:
        inv, sens = cell.get("invariance"), cell.get("sensitivity")
        if inv:
            rows.append(_inv_row(cell, "paraphrases", inv))
            rows += [_inv_row(cell, kind, block) for kind, block in inv["by_kind"].items()]
        if sens:
            rows.append(_sens_row(cell, "flips", sens))
            for attribute, block in sens["by_attribute"].items():
                rows.append(_sens_row(cell, attribute, block))
                rows += [_sens_row(cell, f"{attribute} / {strength}", b) for strength, b in block["by_strength"].items()]
    if len(rows) == 1:
        return "no LGIP cells"
    return _render(rows)
