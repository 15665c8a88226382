"""Who contributes most to a failed check: rankers of a cell's groups (or rows), one per kind of check.

A ranker takes ``(groups, origs, family, dataset)``: the cell's rows by ``group_id`` (sorted by variant,
then row id) and the dataset's orig row of each group, and returns ``(sort key..., line)`` tuples;
``laya_robustness.gate.explain.worst_groups`` sorts them and keeps the first lines. Only contributing
groups are ranked.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.metrics.accuracy import group_means
from laya_robustness.records import ORIG

_RECORD_FIELDS = ("row_id", "group_id", "dataset", "family", "variant", "label", "argmax")


def checked(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out = list(records)
    for i, r in enumerate(out):
        missing = [f for f in _RECORD_FIELDS if f not in r]
        if missing:
            raise ValueError(f"record {i} ({r.get('row_id', '?')}) lacks field(s) {', '.join(missing)}")
    return out


def by_group(rows: Iterable[Mapping[str, Any]]) -> dict[str, list]:
    """group_id -> its rows sorted by (variant, row_id)."""
    out: dict[str, list] = defaultdict(list)
    for r in rows:
        out[r["group_id"]].append(r)
    return {g: sorted(rs, key=lambda r: (r["variant"], r["row_id"])) for g, rs in out.items()}


def orig_rows(records: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r["dataset"] == dataset and r["family"] == ORIG:
            if r["group_id"] in out:
                raise ValueError(f"group {dataset}/{r['group_id']} has more than one unperturbed (orig) row")
            out[r["group_id"]] = r
    return out


def _answers(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{r['variant']}:{r['argmax']}" for r in rows)


def _labels(rows: Sequence[Mapping[str, Any]]) -> str:
    labels = sorted({r["label"] for r in rows})
    if len(labels) == 1:
        return f"label {labels[0]}"
    return "labels " + ", ".join(f"{r['variant']}:{r['label']}" for r in rows)


def _acc(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The accuracy of one group's rows (metrics.accuracy), None without a scored row."""
    means = group_means(rows)
    return next(iter(means.values())) if means else None


def _orig_text(orig: Mapping[str, Any] | None) -> str:
    return "orig answer -" if orig is None else f"orig answer {orig['argmax']} (label {orig['label']})"


def _need_orig(origs: Mapping[str, Any], dataset: str, check: str) -> None:
    if not origs:
        raise ValueError(f"{check} needs the unperturbed (family 'orig') rows of dataset {dataset!r}; none were given")


def worst_flip(groups, origs, family, dataset):
    """Groups by flip rate against their orig answer, highest first (groups without flips left out)."""
    _need_orig(origs, dataset, "max_flip")
    ranked = []
    for g, rows in groups.items():
        if g in origs:
            flipped = sum(r["argmax"] != origs[g]["argmax"] for r in rows)
            if flipped:
                line = f"{g}: {_orig_text(origs[g])} -> variants {_answers(rows)} ({flipped}/{len(rows)} flipped)"
                ranked.append((-flipped / len(rows), g, line))
    return ranked


def worst_drop(groups, origs, family, dataset):
    """Groups by accuracy loss against orig, largest first (groups that lose nothing left out)."""
    _need_orig(origs, dataset, "max_drop")
    ranked = []
    for g, rows in groups.items():
        acc, base = _acc(rows), _acc([origs[g]]) if g in origs else None
        if acc is not None and base is not None and base - acc > 0:
            line = (
                f"{g}: acc {base:.2f} -> {acc:.2f} (loss {base - acc:.2f}); "
                f"{_orig_text(origs[g])} -> variants {_answers(rows)}"
            )
            ranked.append((acc - base, g, line))
    return ranked


def worst_acc(groups, origs, family, dataset):
    """Groups by accuracy, lowest first (fully right groups left out)."""
    ranked = []
    for g, rows in groups.items():
        acc = _acc(rows)
        if acc is not None and acc < 1:
            line = f"{g}: acc {acc:.2f}; {_labels(rows)} -> variants {_answers(rows)}; {_orig_text(origs.get(g))}"
            ranked.append((acc, g, line))
    return ranked


def worst_gap(groups, origs, family, dataset):
    """Groups still answered right under the control, most right first: they show the image is not needed."""
    ranked = []
    for g, rows in groups.items():
        acc = _acc(rows)
        if acc:
            line = (
                f"{g}: still right under {family} (acc {acc:.2f}); "
                f"{_labels(rows)} -> variants {_answers(rows)}; {_orig_text(origs.get(g))}"
            )
            ranked.append((-acc, g, line))
    return ranked


def worst_ece(groups, origs, family, dataset):
    """Wrong rows by confidence (max prob), most confident first."""
    ranked = []
    for g, rows in groups.items():
        for r in rows:
            if "probs" not in r or not r["probs"]:
                raise ValueError(f"record {r['row_id']} lacks 'probs', which max_ece needs")
            if r["label"] >= 0 and r["argmax"] != r["label"]:
                conf = max(r["probs"])
                line = (
                    f"{r['row_id']} (group {g}, variant {r['variant']}): "
                    f"answer {r['argmax']} with p={conf:.3f}, label {r['label']}"
                )
                ranked.append((-conf, g, r["row_id"], line))
    return ranked


def worst_asr(groups, origs, family, dataset):
    """Groups by the share of their variants pulled to the attack target (``meta["target"]``), highest first.

    Only variants whose group's orig answer was not already the target count, as in the ASR itself.
    """
    _need_orig(origs, dataset, "max_asr")
    ranked = []
    for g, rows in groups.items():
        if g not in origs:
            continue
        attackable = [r for r in rows if origs[g]["argmax"] != int(r["meta"]["target"])]
        hits = [r for r in attackable if r["argmax"] == int(r["meta"]["target"])]
        if hits:
            line = (f"{g}: {_orig_text(origs[g])}, target {int(hits[0]['meta']['target'])} -> variants "
                    f"{_answers(attackable)} ({len(hits)}/{len(attackable)} took the target)")
            ranked.append((-len(hits) / len(attackable), g, line))
    return ranked


def worst_lgip(groups, origs, family, dataset):
    """Captions by the largest similarity change of a variant against the orig caption."""
    ranked = []
    for g, rows in groups.items():
        if g not in origs:
            continue
        s0 = origs[g]["logits"][0]
        worst = max(rows, key=lambda r: (abs(r["logits"][0] - s0), r["row_id"]))
        line = (f"{g}: s(orig) {s0:.4f} -> {worst['variant']} {worst['logits'][0]:.4f} "
                f"({len(rows)} variant(s))")
        ranked.append((-abs(worst["logits"][0] - s0), g, line))
    return ranked
