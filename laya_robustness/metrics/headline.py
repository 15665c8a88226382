"""Headline metrics: the numbers a family's limits read, each a mean over units with an image cluster.

A headline metric turns a cell's records (one family on one dataset) and the orig record of each
group into *units*: ``(cluster, value)`` pairs. Its value is the plain mean of the unit values,
and a cluster bootstrap over the units gives its interval (``metrics.bootstrap.mean_ci``), so
every headline has a point estimate, a count (``count_key``) and an interval by one definition.

- ``acc``: a unit per group with a scored row (label >= 0); value = the group's mean correctness.
  acc = (1/G) sum_g (1/n_g) sum_{i in g} [argmax_i == label_i]
- ``delta``: a unit per group present in both the cell and orig; value = acc_g(cell) - acc_g(orig).
- ``flip``: a unit per group with an orig row; value = the share of its rows whose argmax differs
  from the orig argmax.  flip = (1/G) sum_g (1/n_g) sum_{i in g} [argmax_i != argmax_orig(g)]
- ``asr`` (attack success rate): a unit per row paired with an orig row whose argmax is not the
  row's ``meta["target"]``; value = [argmax == target].
- ``flip`` of option_set (:data:`LABEL_FLIP`): a unit per paired row whose orig answer is still offered
  (through ``meta["kept"]`` or ``meta["source_options"]``); value = [the answer, mapped back to the
  original option indices, differs from the orig answer]. Pooled over the variants.

>>> row = {"dataset": "d", "group_id": "a", "cluster": "c1", "label": 0, "logits": [0, 0]}
>>> orig = {("d", "a"): {**row, "argmax": 0}}
>>> rows = [{**row, "argmax": a} for a in (0, 1, 1, 1)]
>>> value(FLIP, rows, orig), value(ACC, rows, orig), value(DELTA, rows, orig)
(0.75, 0.25, -0.75)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from laya_robustness.metrics.accuracy import GroupKey, group_flips, group_key, group_means, paired_deltas
from laya_robustness.records import UNPARSED_ANSWER, option_count

Units = list[tuple[str, float]]
Orig = Mapping[GroupKey, Mapping[str, Any]]


@dataclass(frozen=True)
class Headline:
    """A headline metric: ``key`` in the cell, the count of its units under ``count_key`` (if any)."""

    key: str
    count_key: str | None
    units: Callable[[Sequence[Mapping[str, Any]], Orig], Units]
    doc: str


def _clusters(rows: Sequence[Mapping[str, Any]]) -> dict[GroupKey, str]:
    return {group_key(r): r["cluster"] for r in rows}


def _group_units(values: Mapping[GroupKey, float], rows: Sequence[Mapping[str, Any]]) -> Units:
    cluster = _clusters(rows)
    return [(cluster[g], v) for g, v in values.items()]


def _acc_units(rows, orig) -> Units:
    return _group_units(group_means(rows), rows)


def _delta_units(rows, orig) -> Units:
    return _group_units(paired_deltas(rows, orig.values()), rows)


def _flip_units(rows, orig) -> Units:
    return _group_units(group_flips(rows, orig.values()), rows)


def _target(r: Mapping[str, Any]) -> int:
    try:
        return int(r["meta"]["target"])
    except (KeyError, TypeError):
        raise ValueError(f"{r['row_id']}: meta lacks 'target' (needed by the attack success rate)") from None


def _asr_units(rows, orig) -> Units:
    out = []
    for r in rows:
        o = orig.get(group_key(r))
        if o is not None and o["argmax"] != _target(r):
            out.append((r["cluster"], float(r["argmax"] == _target(r))))
    return out


#: The meta key holding each option_set variant's index map (the variant's own key wins over a copied source key).
INDEX_MAP_KEYS = {"drop_wrong": "kept", "add_distractor": "source_options"}


def index_map(r: Mapping[str, Any]) -> list[int | None]:
    """New option index -> original option index (None: an option the orig row did not have).

    From ``meta["kept"]`` (drop_wrong: a dropped option) or ``meta["source_options"]`` (add_distractor:
    an added one); another variant uses whichever of the two it has.
    """
    meta = r.get("meta", {})
    key = INDEX_MAP_KEYS.get(r["variant"]) or ("source_options" if "source_options" in meta else "kept")
    if key not in meta:
        raise ValueError(f"{r['row_id']}: meta lacks {key!r} (needed to map answers back to the orig options)")
    mapping = list(meta[key])
    if len(mapping) != option_count(r):
        raise ValueError(f"{r['row_id']}: meta {key!r} has {len(mapping)} entries for {option_count(r)} options")
    return mapping


def mapped_answer(r: Mapping[str, Any], mapping: Sequence[int | None]) -> int | None:
    """The row's answer as an index of the orig row's options (None: an option the orig row did not have); an
    unparsed answer stays ``UNPARSED_ANSWER``, its own answer."""
    return UNPARSED_ANSWER if r["argmax"] == UNPARSED_ANSWER else mapping[r["argmax"]]


def _label_flip_units(rows, orig) -> Units:
    out = []
    for r in rows:
        o = orig.get(group_key(r))
        if o is None:
            continue
        mapping = index_map(r)
        if o["argmax"] in mapping:
            out.append((r["cluster"], float(mapped_answer(r, mapping) != o["argmax"])))
    return out


ACC = Headline("acc", None, _acc_units, "group-weighted accuracy of the rows with a label")
DELTA = Headline("delta", None, _delta_units, "paired accuracy change against the same groups' orig rows")
FLIP = Headline("flip", None, _flip_units, "group-weighted share of answers that differ from the orig answer")
ASR = Headline("asr", "n_attackable", _asr_units, "share of attackable rows pulled to meta.target")
LABEL_FLIP = Headline("flip", "n_comparable", _label_flip_units,
                      "share of rows whose orig answer is still offered that answer something else (label space)")


def value(metric: Headline, rows: Sequence[Mapping[str, Any]], orig: Orig) -> float | None:
    """The metric's point estimate: the mean of its unit values (None without a unit)."""
    units = metric.units(rows, orig)
    return sum(v for _, v in units) / len(units) if units else None


def headline_values(metrics: Sequence[Headline], rows: Sequence[Mapping[str, Any]], orig: Orig) -> dict:
    """``{key: value}`` of every metric, plus ``{count_key: number of units}`` where it has one."""
    out: dict[str, Any] = {}
    for m in metrics:
        units = m.units(rows, orig)
        out[m.key] = sum(v for _, v in units) / len(units) if units else None
        if m.count_key:
            out[m.count_key] = len(units)
    return out
