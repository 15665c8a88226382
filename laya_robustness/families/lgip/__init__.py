"""lgip_paraphrase, lgip_flip and lgip_combined: language-guided invariance probing of a dual encoder.

The builders and their rules are in ``laya_robustness.families.lgip.caption_variants``, the metrics in
``laya_robustness.metrics.lgip``; this module declares the three families. They run on caption
rows (``--captions``) scored by a dual encoder (a CLIP / SigLIP ``--model``, or ``--dual-model``),
and are reported in the ``"lgip"`` block. Headline metrics, over the cell's pairs (a paraphrase or
a flip with its reference: the orig caption, or for a combined flip the combined paraphrase):

- ``e_inv`` = (1/P) sum |s(I, c) - s(I, c')| over the P paraphrase pairs (``n_paraphrase_pairs``);
- ``e_sens`` = (1/F) sum (s(I, c) - s(I, c_flip)) and ``pr`` = (1/F) sum [s(I, c) > s(I, c_flip)]
  over the F flip pairs (``n_flip_pairs``);
- ``pr_min``: the lowest PR of any attribute (object, colour, count), which ``min_pr`` reads, with
  ``pr_min_attribute`` naming it and ``pr_min_se`` its standard error (its 95% interval's width / 3.92).
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Mapping, Sequence

from laya_robustness.families import Family, declare
from laya_robustness.families.lgip import caption_variants as lgip
from laya_robustness.metrics.headline import Headline
from laya_robustness.metrics.lgip import lgip_cell, lgip_pairs

CHECKS = ("max_e_inv", "min_pr")


def _pairs(rows, orig):
    dataset = rows[0]["dataset"] if rows else None
    origs = [o for o in orig.values() if o["dataset"] == dataset]
    return lgip_pairs([*origs, *rows])


def _e_inv_units(rows, orig):
    return [(p.cluster, abs(p.reference - p.variant)) for p in _pairs(rows, orig)[0]]


def _e_sens_units(rows, orig):
    return [(p.cluster, p.reference - p.variant) for p in _pairs(rows, orig)[1]]


def _pr_units(rows, orig):
    return [(p.cluster, float(p.reference > p.variant)) for p in _pairs(rows, orig)[1]]


E_INV = Headline("e_inv", "n_paraphrase_pairs", _e_inv_units, "mean |s(I, c) - s(I, c')| over paraphrase pairs")
E_SENS = Headline("e_sens", None, _e_sens_units, "mean s(I, c) - s(I, c_flip) over flip pairs")
PR = Headline("pr", "n_flip_pairs", _pr_units, "share of flip pairs with s(I, c) > s(I, c_flip)")


def lgip_block_cell(rows: Sequence[Mapping[str, Any]], orig: Mapping, boot: Mapping[str, int]) -> dict:
    """The LGIP statistics of one cell (``metrics.lgip.lgip_cell``) and the worst attribute's PR."""
    dataset = rows[0]["dataset"]
    origs = [o for o in orig.values() if o["dataset"] == dataset]
    cell = lgip_cell([*origs, *rows], seed=boot["seed"], n_boot=boot["n_boot"])
    for key in ("family", "dataset", "n_boot"):
        cell.pop(key)
    by_attribute = (cell.get("sensitivity") or {}).get("by_attribute", {})
    worst = min(by_attribute, key=lambda a: (by_attribute[a]["pr"], a)) if by_attribute else None
    cell["pr_min"] = by_attribute[worst]["pr"] if worst else None
    ci = by_attribute[worst]["pr_ci"] if worst else None
    cell["pr_min_se"] = (ci[1] - ci[0]) / (2 * NormalDist().inv_cdf(0.975)) if ci else None
    cell["pr_min_attribute"] = worst
    return cell


def _paraphrases(rows, seed):
    """The rule-based paraphrases and the user's (``meta["paraphrases"]`` of the source row)."""
    user = {r.row_id: tuple(r.meta.get("paraphrases", ())) for r in rows}
    return lgip.build_paraphrases(rows, seed, user=user)


_FLIP_VARIANTS = tuple(f"{attribute}_*" for attribute in lgip.ATTRIBUTES)  # <attribute>_<strength>
_COMMON = dict(kind="probe", block="lgip", source="captions", cell=lgip_block_cell, reads_pixels=False)

declare(Family(
    name=lgip.FAMILY_PARAPHRASE, build=_paraphrases, variants=tuple(lgip.PARAPHRASE_RULES) + ("user_*",),
    meta_keys={"*": ("rule", "kind")}, headline=(E_INV,), checks=("max_e_inv",), title="paraphrase",
    summary="the caption reworded: wrappers, synonyms, passive voice, reordering, user paraphrases", **_COMMON,
))
declare(Family(
    name=lgip.FAMILY_FLIP, build=lgip.build_flips, variants=_FLIP_VARIANTS,
    meta_keys={"*": ("attribute", "strength", "from", "to")}, headline=(PR, E_SENS), checks=("min_pr",),
    title="flip", summary="one object, colour or count word changed to contradict the image", **_COMMON,
))
declare(Family(
    name=lgip.FAMILY_COMBINED, build=lgip.build_combined, variants=("paraphrase", *_FLIP_VARIANTS),
    meta_keys={"*": ("role", "rule")}, headline=(E_INV, PR, E_SENS), checks=CHECKS, title="paraphrase + flip",
    summary="a paraphrase of the caption, and the same rewording of each flip", **_COMMON,
))
