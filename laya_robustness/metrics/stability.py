"""Stability metrics (the ``"stability"`` block): how often a meaning-preserving change moves the answer.

A record is paired with the orig record ``o`` of its group (a variant without one is left out of
everything below). The answer changed when ``changed(r, o)``: the argmax differs (choice / noul
rows), or the normalised answer text differs (open rows: ``metrics.accuracy.answer_of``, the
``answer`` an open record carries, normalised by ``answers.normalize_answer`` when it was made).

Headlines (each a mean over units with the unit's image cluster, as in ``metrics.headline``):

- ``av`` (eq. 5 of the reference), one unit per paired row, pooled over rows (not group-weighted):
  AV = (1/Z) sum_i sum_{s in S_i} [M(s) != M(S_i)],  Z = the number of paired rows (``n_paired``)
- ``v`` (eq. 4), one unit per sample (group) with an orig row and at least one paired row in the
  cell (``n_samples``): V = (1/N) sum_i [exists s in S_i: M(s) != M(S_i)] = 1 - (share of stable samples)

Cell metrics (``stability_cell``, the base of every family's cell):

- ``acc``: group-weighted accuracy of the cell's rows; ``orig_acc``: of the orig rows of the
  same groups (``metrics.accuracy.is_correct``: the argmax is the label, or an open row's answer
  is accepted; rows without a right answer are left out).
- ``variants``: per variant ``n_rows``, ``n_paired``, ``av`` (the share of its paired rows whose
  answer changed) and ``acc`` (the mean correctness of its rows).
- ``overlay_cell`` adds ``by_truth`` (Table 4 of the reference): per ground truth ``t`` ("yes" /
  "no" for noul rows, the label's letter "A", "B"... for choice rows, "open" for open rows), over
  the groups whose orig row has ground truth ``t``: ``orig_acc`` = mean [o right] and per variant
  ``acc`` = mean [r right].
- ``rotation_cell`` adds ``by_question`` (Fig. 5): for the rotation-variant and the
  rotation-invariant questions (``meta["rotation_variant"]``) apart, ``av`` and ``v`` as above and
  per angle (``meta["image_op"]["angle"]``) the share of paired rows whose answer changed.
- ``any_visual_cell`` (the "Any" row of Tables 1-2): ``av`` and ``v`` over the rows of every
  visual family of a dataset together (V: a sample changed by at least one of them), plus
  ``av`` / ``v`` per family.

The summary adds each headline's cluster-bootstrap interval and standard error (``av_ci``,
``av_se``, ``v_ci``, ``v_se``); a cell function takes the bootstrap settings as its third argument
(the summary's contract) and uses none of them.

>>> o = {"dataset": "d", "group_id": "g1", "cluster": "c1", "label": 1, "argmax": 1, "primitive": "noul"}
>>> orig = {("d", "g1"): o, ("d", "g2"): {**o, "group_id": "g2", "cluster": "c2"}}
>>> rows = [{**o, "variant": "a", "argmax": 0}, {**o, "variant": "b"},
...         {**o, "group_id": "g2", "cluster": "c2", "variant": "a"}]
>>> headline_values((AV, V), rows, orig)
{'av': 0.3333333333333333, 'n_paired': 3, 'v': 0.5, 'n_samples': 2}
"""

from __future__ import annotations

import string
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.answers import answer_of, is_correct, is_scored
from laya_robustness.metrics.accuracy import GroupKey, group_key
from laya_robustness.metrics.headline import Headline, Units, headline_values
from laya_robustness.records import OPEN

Record = Mapping[str, Any]
Orig = Mapping[GroupKey, Record]
Boot = Mapping[str, int] | None
NOUL_TRUTH = ("no", "yes")
ROTATION_CLASSES = {True: "variant", False: "invariant"}


def changed(record: Record, orig: Record) -> bool:
    """Whether ``record`` answered differently from its orig record (argmax, or normalised answer text)."""
    return answer_of(record) != answer_of(orig)


def is_right(record: Record) -> bool | None:
    """``metrics.accuracy.is_correct`` of a record with a right answer; None for one without (label -1)."""
    return is_correct(record) if is_scored(record) else None


def truth_of(record: Record) -> str | None:
    """The ground truth as the reference's Table 4 shows it: "no" / "yes", an option letter, or "open"."""
    if record.get("primitive") == OPEN:
        return OPEN
    label = record["label"]
    if label < 0:
        return None
    if record["primitive"] == "noul":
        return NOUL_TRUTH[label]
    return string.ascii_uppercase[label] if label < 26 else str(label)


def _mean(values: Iterable[float]) -> float | None:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None


def _paired(rows: Sequence[Record], orig: Orig) -> list[tuple[Record, Record]]:
    return [(r, orig[group_key(r)]) for r in rows if group_key(r) in orig]


def _av_units(rows: Sequence[Record], orig: Orig) -> Units:
    return [(r["cluster"], float(changed(r, o))) for r, o in _paired(rows, orig)]


def _v_units(rows: Sequence[Record], orig: Orig) -> Units:
    moved: dict[GroupKey, bool] = {}
    cluster: dict[GroupKey, str] = {}
    for r, o in _paired(rows, orig):
        g = group_key(r)
        moved[g] = moved.get(g, False) or changed(r, o)
        cluster[g] = r["cluster"]
    return [(cluster[g], float(m)) for g, m in moved.items()]


AV = Headline("av", "n_paired", _av_units,
              "share of perturbed instances whose answer differs from the orig answer (pooled over rows)")
V = Headline("v", "n_samples", _v_units,
             "share of samples whose answer changed under at least one perturbed instance")
STABILITY = (AV, V)


def _group_acc(rows: Sequence[Record]) -> float | None:
    """Group-weighted accuracy: (1/G) sum_g mean_{i in g} [i right], over groups with a gold row."""
    hits: dict[GroupKey, list[bool]] = defaultdict(list)
    for r in rows:
        right = is_right(r)
        if right is not None:
            hits[group_key(r)].append(right)
    return _mean(sum(v) / len(v) for v in hits.values())


def _by_variant(rows: Sequence[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = defaultdict(list)
    for r in rows:
        out[r["variant"]].append(r)
    return {v: out[v] for v in sorted(out)}


def _variant_stats(rows: Sequence[Record], orig: Orig) -> dict:
    pairs = _paired(rows, orig)
    return {
        "n_rows": len(rows),
        "n_paired": len(pairs),
        "av": _mean(changed(r, o) for r, o in pairs),
        "acc": _mean(x for x in map(is_right, rows) if x is not None),
    }


def stability_cell(rows: Sequence[Record], orig: Orig, boot: Boot = None) -> dict:
    """``{"n_rows", "n_groups", "acc", "orig_acc", "variants"}`` of one stability cell (see the module doc).

    >>> o = dict(dataset="d", group_id="g", cluster="c", primitive="choice", label=0, argmax=0, variant="orig")
    >>> cell = stability_cell([dict(o, variant="v1", argmax=1), dict(o, variant="v2")], {("d", "g"): o})
    >>> cell["acc"], cell["orig_acc"], cell["variants"]["v1"]["av"]
    (0.5, 1.0, 1.0)
    """
    groups = dict.fromkeys(group_key(r) for r in rows)
    return {
        "n_rows": len(rows),
        "n_groups": len(groups),
        "acc": _group_acc(rows),
        "orig_acc": _group_acc([orig[g] for g in groups if g in orig]),
        "variants": {v: _variant_stats(vr, orig) for v, vr in _by_variant(rows).items()},
    }


def _truth_table(rows: Sequence[Record], orig: Orig) -> dict:
    """ground truth -> {"n_groups", "orig_acc", "variants": {variant: {"n_rows", "acc"}}} (Table 4)."""
    by_truth: dict[str, list[Record]] = defaultdict(list)
    for r, o in _paired(rows, orig):
        t = truth_of(o)
        if t is not None:
            by_truth[t].append(r)
    out = {}
    for t in sorted(by_truth):
        sub = by_truth[t]
        origs = [orig[g] for g in dict.fromkeys(group_key(r) for r in sub)]
        variants = {v: {"n_rows": len(vr), "acc": _mean(x for x in map(is_right, vr) if x is not None)}
                    for v, vr in _by_variant(sub).items()}
        out[t] = {"n_groups": len(origs), "orig_acc": _mean(x for x in map(is_right, origs) if x is not None),
                  "variants": variants}
    return out


def overlay_cell(rows: Sequence[Record], orig: Orig, boot: Boot = None) -> dict:
    """``stability_cell`` plus ``by_truth``: accuracy per (ground truth, overlaid text) next to orig accuracy.

    >>> o = dict(dataset="d", group_id="g", cluster="c", primitive="noul", label=1, argmax=1, variant="orig")
    >>> overlay_cell([dict(o, variant="answer_no", argmax=0)], {("d", "g"): o})["by_truth"]
    {'yes': {'n_groups': 1, 'orig_acc': 1.0, 'variants': {'answer_no': {'n_rows': 1, 'acc': 0.0}}}}
    """
    return {**stability_cell(rows, orig, boot), "by_truth": _truth_table(rows, orig)}


def _rotation_variant(record: Record) -> bool:
    value = record.get("meta", {}).get("rotation_variant")
    if not isinstance(value, bool):
        raise ValueError(f"{record.get('row_id', '?')}: meta 'rotation_variant' must be true or false, got {value!r}")
    return value


def _angle(record: Record) -> float:
    try:
        return float(record["meta"]["image_op"]["angle"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{record.get('row_id', '?')}: meta lacks image_op.angle (needed by the rotation split)") from None


def _rotation_class(rows: Sequence[Record], orig: Orig) -> dict:
    """AV and V of one question class, and per angle (in numeric order) the share of changed answers."""
    by_variant = _by_variant(rows)
    angles = {}
    for v in sorted(by_variant, key=lambda v: _angle(by_variant[v][0])):
        pairs = _paired(by_variant[v], orig)
        angles[v] = {"angle": _angle(by_variant[v][0]), "n_paired": len(pairs),
                     "av": _mean(changed(r, o) for r, o in pairs)}
    return {**headline_values(STABILITY, rows, orig), "angles": angles}


def rotation_cell(rows: Sequence[Record], orig: Orig, boot: Boot = None) -> dict:
    """``stability_cell`` plus ``by_question``: AV, V and per-angle AV for rotation-variant and -invariant questions.

    >>> o = dict(dataset="d", group_id="g", cluster="c", primitive="noul", label=1, argmax=1, variant="orig")
    >>> r = dict(o, variant="rot90", argmax=0, meta={"rotation_variant": True, "image_op": {"angle": 90}})
    >>> rotation_cell([r], {("d", "g"): o})["by_question"]["variant"]["angles"]
    {'rot90': {'angle': 90.0, 'n_paired': 1, 'av': 1.0}}
    """
    split: dict[str, list[Record]] = defaultdict(list)
    for r in rows:
        split[ROTATION_CLASSES[_rotation_variant(r)]].append(r)
    by_question = {name: _rotation_class(split[name], orig) for name in ROTATION_CLASSES.values() if split[name]}
    return {**stability_cell(rows, orig, boot), "by_question": by_question}


def any_visual_cell(rows: Sequence[Record], orig: Orig, boot: Boot = None) -> dict:
    """The "Any" row: AV over every instance of the visual families given, V over samples changed by any.

    ``rows`` are the records of one dataset's visual stability families (``laya_robustness.families.any_families()`` names them).

    >>> o = dict(dataset="d", group_id="g", cluster="c", primitive="noul", label=1, argmax=1, variant="orig")
    >>> rows = [dict(o, family="shift", variant="a"), dict(o, family="overlay", variant="b", argmax=0)]
    >>> cell = any_visual_cell(rows, {("d", "g"): o})
    >>> cell["av"], cell["v"], cell["families"]["overlay"]["v"]
    (0.5, 1.0, 1.0)
    """
    by_family: dict[str, list[Record]] = defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r)
    families = {f: {"n_rows": len(by_family[f]), **headline_values(STABILITY, by_family[f], orig)}
                for f in sorted(by_family)}
    return {"n_rows": len(rows), **headline_values(STABILITY, rows, orig), "families": families}

