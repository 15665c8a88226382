"""Layerwise divergence (the stability paper's Sec. 5.1, Fig. 4): how far each layer's hidden state at the
last prompt position moves from the unperturbed sample's, for perturbations that changed the answer and
for those that did not.

For an orig row s and a perturbed row s' of its group, at layer l (0 = the embeddings, then every decoder
layer) of a scorer's ``layer_states``:

    D_l(s, s') = || a_l(s) - a_l(s') ||_2                                  (eq. 6, 7)
    N_l(s, s') = D_l(s, s') / ((1/P) sum over the P pairs of the same modality of D_l)

so each layer's distances are divided by that layer's mean distance over every pair of the modality
(changed or not); a layer whose mean distance is 0 cannot be normalised (None). The result holds, per
modality, the mean N_l over the pairs whose answer changed and over those whose answer did not, and
their gap (changed - unchanged). A family without a modality is reported under its own name.

>>> import numpy as np
>>> layer_distances(np.zeros((2, 3)), np.array([[0, 0, 0], [3.0, 4.0, 0]])).tolist()
[0.0, 5.0]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from laya_robustness.answers import answer_of
from laya_robustness.families import modalities
from laya_robustness.records import parse_records
from laya_robustness.scoring.base import capabilities

#: Rows per call of ``scorer.layer_states``.
BATCH_SIZE = 32


def layer_distances(orig_state: np.ndarray, perturbed_state: np.ndarray) -> np.ndarray:
    """D_l = ||a_l(s) - a_l(s')||_2 for every layer l of two (n_layers + 1, hidden) arrays."""
    a, b = np.asarray(orig_state, dtype=np.float64), np.asarray(perturbed_state, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"need two (n_layers + 1, hidden) arrays of one shape, got {a.shape} and {b.shape}")
    return np.linalg.norm(a - b, axis=1)


def normalised_divergence(pairs: Sequence[tuple[str, np.ndarray, bool]]) -> dict:
    """Per group name (a modality), from ``(name, distances per layer, answer changed)`` pairs: the mean
    normalised distance per layer of the changed and of the unchanged pairs, and their gap (module doc).

    >>> out = normalised_divergence([("visual", np.array([1.0, 2.0]), True), ("visual", np.array([1.0, 0.0]), False)])
    >>> out["visual"]["changed"], out["visual"]["unchanged"], out["visual"]["gap"]
    ([1.0, 2.0], [1.0, 0.0], [0.0, 2.0])
    """
    by_name: dict[str, list[tuple[np.ndarray, bool]]] = defaultdict(list)
    for name, distances, changed in pairs:
        by_name[name].append((np.asarray(distances, dtype=np.float64), bool(changed)))
    out = {}
    for name in sorted(by_name):
        items = by_name[name]
        n_layers = {d.shape for d, _ in items}
        if len(n_layers) != 1:
            raise ValueError(f"{name}: pairs have distances of different shapes {sorted(n_layers)}")
        stacked = np.stack([d for d, _ in items])
        changed = np.array([c for _, c in items], dtype=bool)
        mean = stacked.mean(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            norm = np.where(mean > 0, stacked / np.where(mean > 0, mean, 1.0), np.nan)

        def layer_means(mask: np.ndarray) -> list[float | None] | None:
            if not mask.any():
                return None
            return [None if np.isnan(v) else float(v) for v in norm[mask].mean(axis=0)]

        ch, un = layer_means(changed), layer_means(~changed)
        gap = None if ch is None or un is None else [None if a is None or b is None else a - b for a, b in zip(ch, un)]
        out[name] = {"n_layers": int(stacked.shape[1]), "n_changed": int(changed.sum()),
                     "n_unchanged": int((~changed).sum()), "changed": ch, "unchanged": un, "gap": gap,
                     "mean_distance": [float(v) for v in mean]}
    return out


def _states(scorer: Any, rows: Sequence[Any], batch_size: int) -> dict[tuple[str, str], np.ndarray]:
    if not capabilities(scorer).layer_states:
        raise ValueError(f"scorer {type(scorer).__name__} has no layer_states(rows) method: the layerwise "
                         "divergence needs the hidden states")
    out: dict[tuple[str, str], np.ndarray] = {}
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        states = list(scorer.layer_states(chunk))
        if len(states) != len(chunk):
            raise ValueError(f"layer_states returned {len(states)} arrays for {len(chunk)} rows")
        for row, state in zip(chunk, states):
            state = np.asarray(state)
            if state.ndim != 2:
                raise ValueError(f"layer_states of row {row.row_id}: expected (n_layers + 1, hidden), "
                                 f"got {state.shape}")
            out[(row.dataset, row.row_id)] = state
    return out


def layerwise_divergence(scorer: Any, orig_rows: Sequence[Any], perturbed_rows: Sequence[Any],
                         records: Iterable[Any], modality_of: Mapping[str, str | None] | None = None,
                         batch_size: int = BATCH_SIZE) -> dict:
    """The normalised layerwise divergence of every perturbed row from its group's orig row.

    ``scorer.layer_states(rows)`` gives per row an (n_layers + 1, hidden) array; ``records`` (prediction
    records of these rows) say whether a perturbed row's answer (``answer_of``) differs from the orig
    row's. Pairs are grouped by their family's modality (``modality_of``, default from the declarations).
    Returns :func:`normalised_divergence`'s dict, plus ``n_pairs``.
    """
    modality_of = modalities() if modality_of is None else modality_of
    by_id = {(r.dataset, r.row_id): r for r in parse_records(records)}
    origs = {(r.dataset, r.group_id): r for r in orig_rows}
    needed = [*origs.values(), *perturbed_rows]
    for row in needed:
        if (row.dataset, row.row_id) not in by_id:
            raise ValueError(f"row {row.row_id} ({row.dataset}) has no prediction record")
    pairs_rows = []
    for row in perturbed_rows:
        orig = origs.get((row.dataset, row.group_id))
        if orig is None:
            raise ValueError(f"perturbed row {row.row_id} has no orig row of group {row.group_id!r}")
        pairs_rows.append((orig, row))
    states = _states(scorer, needed, batch_size)
    pairs = []
    for orig, row in pairs_rows:
        changed = answer_of(by_id[(row.dataset, row.row_id)]) != answer_of(by_id[(orig.dataset, orig.row_id)])
        distances = layer_distances(states[(orig.dataset, orig.row_id)], states[(row.dataset, row.row_id)])
        pairs.append((modality_of.get(row.family) or row.family, distances, changed))
    return {"n_pairs": len(pairs), "modalities": normalised_divergence(pairs)}


def layerwise_from_predictions(predictions: str | Path, data: str | Path, families: Sequence[str], *,
                               scorer: Any, seed: int | None = None, rows_per_set: int | None = None,
                               max_groups: int = 0, modality_of: Mapping[str, str | None] | None = None) -> dict:
    """The layerwise divergence of a run, re-built from its predictions file and its data.

    The source rows are read from ``data`` as the run read them (``laya_robustness.run.inputs.run_inputs``: its reading
    rules and the user's rephrasings and translations, from the summary.json beside the predictions) and the
    perturbed rows built by ``build_variants(family, rows, seed)`` for each of ``families``, with seed and rows
    per set from that summary's meta unless given (else 0 and 0). ``max_groups`` > 0 keeps the first
    groups of each dataset (row-id order). Every re-built row must have a record in the predictions.
    """
    from laya_robustness.families import build_variants
    from laya_robustness.predictions import read_predictions, sibling_meta
    from laya_robustness.run.inputs.run_inputs import InputSpec, question_rows

    predictions = Path(predictions)
    meta = sibling_meta(predictions)
    seed = seed if seed is not None else int(meta.get("seed", 0))
    rows_per_set = rows_per_set if rows_per_set is not None else int(meta.get("rows_per_set", 0))
    records = read_predictions(predictions)
    known = {(r.dataset, r.row_id) for r in records}
    orig_rows, perturbed = [], []
    spec = InputSpec.from_meta(data, {**meta, "seed": seed, "rows_per_set": rows_per_set})
    for dataset, rows in question_rows(spec).items():
        keep = rows[:max_groups] if max_groups > 0 else rows
        groups = {r.group_id for r in keep}
        orig_rows += keep
        for family in families:
            perturbed += [v for v in build_variants(family, rows, seed) if v.group_id in groups]
    missing = [r for r in [*orig_rows, *perturbed] if (r.dataset, r.row_id) not in known]
    if missing:
        raise ValueError(f"{predictions}: {len(missing)} row(s) re-built from {data} (seed {seed}, rows per set "
                         f"{rows_per_set}) have no record, e.g. {missing[0].row_id}; the predictions come from "
                         "other data, seed, rows per set or families")
    return {"seed": seed, "rows_per_set": rows_per_set, "families": list(families),
            **layerwise_divergence(scorer, orig_rows, perturbed, records, modality_of)}
