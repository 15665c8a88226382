"""The worst flipped groups of each family, and their rows rebuilt (images included) from the data and the seed.

A row *flips* by its family's own ``flip`` headline (``metrics.headline``: the answer differs from
the orig answer; for option_set in the original option indices). A family without a ``flip``
headline (abstain, form, negation, injection) shows rows that *broke*: the orig row was answered
right, this one wrong. A group's share is the mean of its rows' values; groups are ranked by share,
then by the highest confidence among their flipped rows (confidently wrong first), then dataset and
group id. Each family shows the best-ranked group of every dataset in turn (so every set appears),
up to ``per_family`` groups, each with up to ``per_group`` of its flipped rows, most confident first.

The predictions file has no pixels: the rows are rebuilt with ``families.build_variants(family,
source_rows[dataset], seed)`` over the whole dataset (a builder may draw from other rows), found by
``row_id`` and checked against their records (variant, group, label, number of options and images,
meta: where a builder records what it drew, e.g. a crop box or an option order), and
``check_source_rows`` compares the data with the run's meta (rows per dataset, and the data
fingerprint when the meta has one), so a mismatch is an error instead of a wrong picture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from laya_robustness.answers import is_correct, is_scored
from laya_robustness.families import build_variants, find_family, get_family
from laya_robustness.metrics.accuracy import group_key, orig_by_group
from laya_robustness.records import ORIG, option_count
from laya_robustness.report.curves import family_order
from laya_robustness.rows import with_pixels

FLIPPED, BROKEN = "flipped", "broke"
#: How each kind of example is described in the report.
HOW = {FLIPPED: "answer differs from the orig answer", BROKEN: "orig answered right, this variant wrong"}


@dataclass(frozen=True)
class Example:
    """One group shown for a family: its orig record and its flipped (or broken) records."""

    family: str
    dataset: str
    group_id: str
    how: str  # FLIPPED or BROKEN
    share: float  # share of the group's comparable rows that flipped (broke)
    n_rows: int  # the group's rows in this family
    orig: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]


def _flip_metric(family: str):
    decl = find_family(family)
    return next((h for h in decl.headline if h.key == "flip"), None) if decl else None


def confidence(record: Mapping[str, Any]) -> float:
    """The record's max probability (0 for an open-answer row, which has none)."""
    return max(record["probs"]) if record["probs"] else 0.0


def _row_values(rows: Sequence[Mapping[str, Any]], orig: Mapping[str, Any], metric) -> list[tuple[Mapping, float]]:
    """(row, 1.0 if it flipped / broke else 0.0) for every row the definition applies to."""
    if metric is None:
        right = is_scored(orig) and is_correct(orig)
        return [(r, float(right and not is_correct(r))) for r in rows if is_scored(r)]
    key = group_key(orig)
    out = []
    for r in rows:
        units = metric.units([r], {key: orig})
        if units:
            out.append((r, sum(v for _, v in units) / len(units)))
    return out


def _rank(example: Example) -> tuple:
    top = max((confidence(r) for r in example.variants), default=0.0)
    return (-example.share, -top, example.dataset, example.group_id)


def family_examples(records: Sequence[Mapping[str, Any]], family: str, orig: Mapping, per_group: int = 3
                    ) -> list[Example]:
    """Every group of ``family`` with at least one flipped (broken) row, best-ranked first."""
    metric = _flip_metric(family)
    groups: dict[tuple[str, str], list] = {}
    for r in records:
        if r["family"] == family:
            groups.setdefault(group_key(r), []).append(r)
    out = []
    for key, rows in groups.items():
        if key not in orig:
            continue
        values = _row_values(rows, orig[key], metric)
        hit = [r for r, v in values if v > 0]
        if not hit:
            continue
        hit.sort(key=lambda r: (-confidence(r), r["variant"], r["row_id"]))
        share = sum(v for _, v in values) / len(values)
        out.append(Example(family, key[0], key[1], BROKEN if metric is None else FLIPPED, share, len(rows),
                           orig[key], tuple(hit[:per_group])))
    return sorted(out, key=_rank)


def select_examples(records: Sequence[Mapping[str, Any]], per_family: int = 5, per_group: int = 3
                    ) -> dict[str, list[Example]]:
    """family -> its shown groups (see the module doc); families without a flipped row are left out."""
    orig = orig_by_group(r for r in records if r["family"] == ORIG)
    out = {}
    for family in family_order({r["family"] for r in records} - {ORIG}):
        ranked = family_examples(records, family, orig, per_group)
        by_dataset: dict[str, list[Example]] = {}
        for e in ranked:
            by_dataset.setdefault(e.dataset, []).append(e)
        picked: list[Example] = []
        turn = 0
        while len(picked) < per_family and any(len(v) > turn for v in by_dataset.values()):
            picked += sorted((v[turn] for v in by_dataset.values() if len(v) > turn), key=_rank)
            turn += 1
        if picked:
            out[family] = picked[:per_family]
    return out


def _plain(value: Any) -> Any:
    """A value as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _check(row, record: Mapping[str, Any]) -> None:
    pairs = [("variant", row.variant, record["variant"]), ("group_id", row.group_id, record["group_id"]),
             ("label", row.label, record["label"]), ("options", len(row.options), option_count(record)),
             ("meta", _plain(dict(row.meta)), _plain(record.get("meta", {})))]
    if "n_images" in record:
        pairs.append(("n_images", len(row.images), record["n_images"]))
    for name, rebuilt, recorded in pairs:
        if rebuilt != recorded:
            raise ValueError(
                f"rebuilt row {record['row_id']!r}: field '{name}' is {rebuilt!r} in the data but {recorded!r} in the "
                f"predictions; render with the data, seed and rows per set the run used")


def rebuild_rows(examples: Mapping[str, Sequence[Example]], source_rows: Mapping[str, Sequence[Any]],
                 seed: int) -> dict[str, Any]:
    """row_id -> the rebuilt Row of every record the examples show (their orig rows included), with its pixels.

    Each needed (family, dataset) is built once: from the source rows of the shown groups for a row-wise
    family, else over the whole dataset (whose images, when they wait in a run's store, are decoded only for
    the rows shown, unless the family reads pixels). A dataset missing from ``source_rows``, a row that is not
    rebuilt, or one that differs from its record raises ValueError.
    """
    wanted: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for family_examples_ in examples.values():
        for e in family_examples_:
            wanted.setdefault((ORIG, e.dataset), []).append(e.orig)
            wanted.setdefault((e.family, e.dataset), []).extend(e.variants)
    out: dict[str, Any] = {}
    for (family, dataset), records in sorted(wanted.items()):
        if dataset not in source_rows:
            raise ValueError(f"dataset {dataset!r} of the predictions is not in the data "
                             f"(it has: {', '.join(sorted(source_rows)) or 'nothing'})")
        source = source_rows[dataset]
        if family != ORIG and get_family(family).row_wise:
            shown = {r["group_id"] for r in records}
            source = [r for r in source if r.group_id in shown]
        built = {r.row_id: r for r in (source if family == ORIG else build_variants(family, source, seed))}
        for record in records:
            row = built.get(record["row_id"])
            if row is None:
                raise ValueError(f"row {record['row_id']!r} of the predictions is not rebuilt from the data "
                                 f"({family} on {dataset}); render with the data, seed and rows per set the run used")
            _check(row, record)
            out[record["row_id"]] = with_pixels(row)
    return out


def check_source_rows(meta: Mapping[str, Any], source_rows: Mapping[str, Sequence[Any]]) -> None:
    """Raise ValueError when the data is not what the run scored: another number of rows in a dataset
    than ``meta["datasets"]`` says, or another ``meta["data_fingerprint"]`` (the snapshot's)."""
    counts = meta.get("datasets")
    if isinstance(counts, Mapping):
        for name, n in sorted(counts.items()):
            have = len(source_rows.get(name, ()))
            if have != n:
                raise ValueError(f"the data has {have} rows of dataset {name!r}, the run scored {n}; render with the "
                                 "data, seed and rows per set the run used")
    if "data_fingerprint" in meta:
        from laya_robustness.run.inputs.fingerprints import data_fingerprint

        if data_fingerprint(source_rows) != meta["data_fingerprint"]:
            raise ValueError("the data's fingerprint differs from the run's (meta.data_fingerprint): render with the "
                             "data, seed and rows per set the run used")
