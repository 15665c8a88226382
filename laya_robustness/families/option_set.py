"""option_set and abstain: the same question with a changed set of options (choice rows only).

option_set (the right answer is still offered, so the label keeps its meaning):

- ``add_distractor``: one option borrowed from another choice row of the same dataset with a
  different ``cluster`` (image), appended at the end; label unchanged. The candidates are
  every option of those rows that is not equal, ignoring case and outer spaces, to one of the
  row's options, in (row_id, option index) order; one is drawn with
  ``keyed_rng(seed, "option_set", row_id, "add_distractor")``. No candidate, no row.
  meta: ``distractor_index`` (= k, the new option's index) and ``source_options`` (for every
  new option index, the original option index, or None for the distractor).
- ``drop_wrong`` (k >= 3): one wrong option, drawn with ``keyed_rng(seed, "option_set",
  row_id, "drop_wrong")``, removed; the label remapped. meta: ``kept`` (the original indices
  of the kept options, in their new order).

abstain (the option set no longer matches the question's answer in the usual way):

- ``drop_gold`` (k >= 3): the gold option removed, so no option is right: label -1.
  meta: ``no_gold`` (True) and ``kept`` (as for drop_wrong).
- ``add_none``: "none of the above" appended; label unchanged; meta: ``none_index`` (= k).
- ``add_none_shuffled``: the same on the images of the row's image_shuffle donor cluster
  (``image_shuffle.Donors``; the donor's images come from its row with the smallest row_id, as in
  image_shuffle). The label is the "none" option: with a mismatched
  image none of the original options is supported by the picture, so "none of the above" is
  the right answer. (Label -1 would hide this: the pick rate of "none" is the metric, and a
  label lets the row's accuracy measure the same thing.) meta: ``none_index`` and
  ``donor_cluster``. Rows without images, or whose dataset has one image, get none.

The distractor candidates and the donors are drawn from the dataset's whole row set
(``families.row_set``), not only from the rows sampled: a row's variants are the same whichever other
rows ``--rows-per-set`` drew.

A row that already offers "none of the above" (ignoring case) gets no add_none variants.
Every variant keeps the source meta keys, group_id and cluster, and shows its options in
label order (``display_order=None``).
"""

from __future__ import annotations

from typing import Any, Sequence

from laya_robustness.families import Family, declare
from laya_robustness.families.image_shuffle import Donors
from laya_robustness.families.row_set import RowSet, row_sets
from laya_robustness.metrics.extensions import abstain_cell, option_set_cell
from laya_robustness.metrics.headline import ACC, LABEL_FLIP
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

OPTION_SET = "option_set"
ABSTAIN = "abstain"
NONE_OPTION = "none of the above"


def _norm(text: str) -> str:
    return text.strip().casefold()


def _is_choice(row: Row) -> bool:
    return row.primitive == "choice"


def _with_options(row: Row, family: str, variant: str, options, label: int, meta: dict[str, Any], **kw) -> Row:
    return row.derive(
        family, variant, options=tuple(options), label=label, display_order=None, meta={**row.meta, **meta}, **kw
    )


def _add_distractor(row: Row, pool: Sequence[tuple[str, str, str]], seed: int) -> Row | None:
    own = {_norm(o) for o in row.options}
    candidates = [o for _, cluster, o in pool if cluster != row.cluster and _norm(o) not in own]
    if not candidates:
        return None
    pick = candidates[int(keyed_rng(seed, OPTION_SET, row.row_id, "add_distractor").integers(len(candidates)))]
    k = len(row.options)
    meta = {"distractor_index": k, "source_options": [*range(k), None]}
    return _with_options(row, OPTION_SET, "add_distractor", (*row.options, pick), row.label, meta)


def _without(row: Row, drop: int) -> tuple[list[int], tuple[str, ...]]:
    kept = [i for i in range(len(row.options)) if i != drop]
    return kept, tuple(row.options[i] for i in kept)


def _drop_wrong(row: Row, seed: int) -> Row | None:
    if len(row.options) < 3:
        return None
    wrong = [i for i in range(len(row.options)) if i != row.label]
    drop = wrong[int(keyed_rng(seed, OPTION_SET, row.row_id, "drop_wrong").integers(len(wrong)))]
    kept, options = _without(row, drop)
    return _with_options(row, OPTION_SET, "drop_wrong", options, kept.index(row.label), {"kept": kept})


def build_option_set(rows: Sequence[Row], seed: int, row_set: RowSet | None = None) -> list[Row]:
    """Every choice row with a borrowed distractor (from the options of its dataset's row set: ``row_set``, or the
    one ``rows`` carry) added and (k >= 3) with one wrong option dropped."""
    sets = row_sets(rows, row_set)
    out = []
    for row in rows:
        if _is_choice(row):
            pool = sets[row.dataset].choice_options
            out.extend(v for v in (_add_distractor(row, pool, seed), _drop_wrong(row, seed)) if v)
    return out


def _abstain_variants(row: Row, donors: Donors) -> list[Row]:
    out = []
    k = len(row.options)
    if k >= 3:
        kept, options = _without(row, row.label)
        out.append(_with_options(row, ABSTAIN, "drop_gold", options, -1, {"no_gold": True, "kept": kept}))
    if NONE_OPTION in {_norm(o) for o in row.options}:
        return out
    options = (*row.options, NONE_OPTION)
    out.append(_with_options(row, ABSTAIN, "add_none", options, row.label, {"none_index": k}))
    found = donors.of(row)
    if found is not None:
        donor, images = found
        meta = {"none_index": k, "donor_cluster": donor}
        out.append(_with_options(row, ABSTAIN, "add_none_shuffled", options, k, meta, images=images))
    return out


def build_abstain(rows: Sequence[Row], seed: int, row_set: RowSet | None = None) -> list[Row]:
    """Every choice row without its gold option (k >= 3) and with "none of the above" added (on the images of its
    donor too, drawn over ``row_set``: ``image_shuffle.Donors``)."""
    donors = Donors(rows, seed, row_set)
    return [v for row in rows if _is_choice(row) for v in _abstain_variants(row, donors)]


declare(Family(
    name=OPTION_SET, reads_pixels=False, reads_row_set=True, build=build_option_set, kind="options",
    block="options",
    variants=("add_distractor", "drop_wrong"),
    meta_keys={"add_distractor": ("distractor_index", "source_options"), "drop_wrong": ("kept",)},
    headline=(ACC, LABEL_FLIP), checks=("max_flip", "min_acc"), cell=option_set_cell,
    summary="a distractor borrowed from another image's row; a wrong option dropped", title="option set",
))
declare(Family(
    name=ABSTAIN, reads_pixels=False, reads_row_set=True, build=build_abstain, kind="options",
    block="options",
    variants=("drop_gold", "add_none", "add_none_shuffled"),
    meta_keys={"drop_gold": ("no_gold", "kept"), "add_none": ("none_index",),
               "add_none_shuffled": ("none_index", "donor_cluster")},
    headline=(ACC,), checks=("min_acc",), cell=abstain_cell,
    summary='gold removed; "none of the above" added (with the real and a mismatched image)', title="abstain",
))
