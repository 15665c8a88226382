"""Turn prediction records into the summary dict: one cell per (family, dataset), in its family's block.

Where a family is reported comes from its declaration (``laya_robustness.families``): the
unperturbed rows and the meaning-preserving perturbations and controls form the flat block
``"families"`` (accuracy, paired delta, flip rate, ECE, intervals, per-variant numbers); every
other family is reported in its own block (``"options"``, ``"form"``, ``"injection"``...), its
cell holding its headline metrics (``metrics.headline``) and its block metrics. The optional
``"floor"`` block holds the ECE noise floor of the flat families. The ``"stability"`` block also holds
the row ``"any"``: per dataset, every default visual stability family pooled (AV over all their
instances, V over samples changed by at least one; ``metrics.stability.any_visual_cell``). Text tables live in
``laya_robustness.report.tables``; the command line in ``laya_robustness.__main__``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.answers import is_correct
from laya_robustness.families import (
    FLAT,
    STABILITY,
    Family,
    any_families,
    blocks,
    compares_flips,
    declared,
    find_family,
    modalities,
)
from laya_robustness.metrics import rounded
from laya_robustness.metrics.accuracy import balanced_accuracy, chance_rate, group_key, majority_rate, orig_by_group
from laya_robustness.metrics.bootstrap import cluster_index, ece_ci, mean_ci, mean_se, resample_counts
from laya_robustness.metrics.calibration import ece
from laya_robustness.metrics.floor import floor_block
from laya_robustness.metrics.headline import ACC, DELTA, FLIP, Headline, headline_values
from laya_robustness.metrics.stability import STABILITY as STABILITY_HEADLINES
from laya_robustness.metrics.stability import any_visual_cell
from laya_robustness.metrics.stability_analysis import stability_analysis
from laya_robustness.records import NO_PROBABILITIES, ORIG, Record, generation_only, parse_records

#: The one-model stability analyses (answer entropy, stable shares, Tables 5, 7 and 8 of the stability
#: study, the mutual-information ratio) of every dataset with variants of a family that has a modality.
STABILITY_ANALYSIS = "stability_analysis"
#: The stability block's row of every visual family pooled (the reference's "Any").
ANY_VISUAL = "any"


def _canonical(records: Iterable[Any]) -> list[Record]:
    """Parsed records in a canonical order; duplicate row ids and split clusters are errors."""
    out = parse_records(records)
    out.sort(key=lambda r: (r.dataset, r.family, r.group_id, r.variant, r.row_id))
    seen: set[tuple[str, str]] = set()
    clusters: dict[tuple[str, str], str] = {}
    for r in out:
        if (r.dataset, r.row_id) in seen:
            raise ValueError(f"row_id {r.row_id!r} occurs more than once in dataset {r.dataset!r}")
        seen.add((r.dataset, r.row_id))
        if clusters.setdefault(r.group, r.cluster) != r.cluster:
            raise ValueError(f"group {r.group_id!r} spans clusters {clusters[r.group]!r} and {r.cluster!r}")
    return out


def block_of(family: str) -> str:
    """The summary block a family is reported in (an undeclared family goes to the flat block)."""
    decl = find_family(family)
    return decl.block if decl else FLAT


def flat_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of the families reported in the flat block (orig included)."""
    return [r for r in records if block_of(r["family"]) == FLAT]


def _cells(records: Sequence[Record]) -> dict[str, dict[str, list[Record]]]:
    """records split by family, then dataset (order kept)."""
    cells: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cells[r.family][r.dataset].append(r)
    return cells


def _interval(counts, metric: Headline, rows, orig, clusters: Mapping[str, int]) -> list[float] | None:
    units = metric.units(rows, orig)
    return mean_ci(counts, [clusters[c] for c, _ in units], [v for _, v in units])


def _cell_counts(rows: Sequence[Mapping[str, Any]], family: str, dataset: str, boot: Mapping[str, int], n: int):
    """The cell's clusters (name -> column) and its (n, C) resample counts, keyed by (seed, family, dataset)."""
    clusters = cluster_index(r["cluster"] for r in rows)
    return clusters, resample_counts(boot["seed"], family, dataset, len(clusters), n)


def uncertainty(metrics: Sequence[Headline], rows, orig, counts, clusters: Mapping[str, int]) -> dict:
    """``<key>_ci`` (95% percentile interval) and ``<key>_se`` (bootstrap standard error) of each headline
    metric, over the cell's cluster resamples; None where a metric has no unit."""
    out: dict[str, Any] = {}
    for m in metrics:
        units = m.units(rows, orig)
        ids, values = [clusters[c] for c, _ in units], [v for _, v in units]
        out[f"{m.key}_ci"] = mean_ci(counts, ids, values) if units else None
        out[f"{m.key}_se"] = mean_se(counts, ids, values) if units else None
    return out


def flip_floor(rows: Sequence[Mapping[str, Any]], orig: Mapping) -> float | None:
    """The flip rate a model with the same confidences would show by chance, group-weighted like ``flip``:

    floor = (1/G) sum_g (1/n_g) sum_{i in g} (1 - q_i(a_o))

    where q_i are the variant row's calibrated probabilities and a_o the orig answer: the flip rate if
    each perturbed answer were drawn from the model's own probabilities for that row instead of taken
    as their argmax. A flip rate above it moves answers more than the model's own uncertainty says.
    Rows without probabilities (open answers) are left out; rows are in label order.
    """
    per_group: dict = defaultdict(list)
    for r in rows:
        o = orig.get(group_key(r))
        if o is None or not r["probs"] or not 0 <= o["argmax"] < len(r["probs"]):
            continue
        per_group[group_key(r)].append(1.0 - r["probs"][o["argmax"]])
    return sum(sum(v) / len(v) for v in per_group.values()) / len(per_group) if per_group else None


def _variants(rows: list, orig: Mapping) -> dict:
    """Point estimates per variant, each on the variant's rows only."""
    out = {}
    for name in sorted({r["variant"] for r in rows}):
        sub = [r for r in rows if r["variant"] == name]
        out[name] = {**headline_values((ACC, DELTA, FLIP), sub, orig), "n_rows": len(sub)}
    return out


def flat_cell(rows: list, orig: Mapping, family: str, dataset: str, boot: Mapping[str, int]) -> dict:
    """Every statistic of one flat-block cell; ``orig`` maps each group to its orig record.

    acc / delta / flip as in ``metrics.headline``; acc_ci and delta_ci are 95% cluster-bootstrap
    intervals from the same resamples (``keyed_rng(seed, "bootstrap", family, dataset)``), ece_ci
    from the first ``n_boot_ece`` of them; ECE over the rows with a label and probabilities, pooled (not
    group-weighted). Rows of a generation-only scorer have no probabilities: their ECE and flip floor are None
    and the cell says why (:func:`probability_note`).
    """
    scored = [r for r in rows if r["label"] >= 0 and r["probs"]]  # ECE needs probabilities
    origs = [orig[g] for g in dict.fromkeys(group_key(r) for r in rows) if g in orig]
    n_boot, n_boot_ece = boot["n_boot"], boot["n_boot_ece"]
    clusters, counts = _cell_counts(rows, family, dataset, boot, max(n_boot, n_boot_ece))
    return {
        **uncertainty((ACC, DELTA, FLIP), rows, orig, counts[:n_boot], clusters),
        "flip_floor": flip_floor(rows, orig),
        "n_groups": len({group_key(r) for r in rows}),
        "n_rows": len(rows),
        **headline_values((ACC, DELTA, FLIP), rows, orig),
        "ece": ece([max(r["probs"]) for r in scored], [is_correct(r) for r in scored]) if scored else None,
        "balanced_acc": balanced_accuracy(rows),
        "chance": chance_rate(rows, origs),
        "majority": majority_rate(rows, origs),
        "variants": _variants(rows, orig),
        "acc_ci": _interval(counts[:n_boot], ACC, rows, orig, clusters),
        "delta_ci": _interval(counts[:n_boot], DELTA, rows, orig, clusters),
        "ece_ci": ece_ci(
            counts[:n_boot_ece],
            [clusters[r["cluster"]] for r in scored],
            [max(r["probs"]) for r in scored],
            [is_correct(r) for r in scored],
        ),
        **probability_note(rows),
    }


def probability_note(rows: Sequence[Mapping[str, Any]]) -> dict:
    """``{"probabilities": NO_PROBABILITIES}`` when rows of the cell were answered without probabilities (a
    generation-only scorer: every probability-based number of the cell is None), else {}."""
    return {"probabilities": NO_PROBABILITIES} if any(generation_only(r) for r in rows) else {}


def block_cell(family: Family, rows: list, orig: Mapping, boot: Mapping[str, int]) -> dict:
    """One cell of a non-flat block: the family's headline metrics with their intervals and standard
    errors, then its block metrics."""
    for r in rows:
        if not family.knows_variant(r["variant"]):
            raise ValueError(f"{r['row_id']}: unknown {family.name} variant {r['variant']!r} "
                             f"(known: {', '.join(family.variants)})")
    clusters, counts = _cell_counts(rows, family.name, rows[0]["dataset"], boot, boot["n_boot"])
    return {**headline_values(family.headline, rows, orig),
            **uncertainty(family.headline, rows, orig, counts, clusters), **family.cell(rows, orig, boot),
            **probability_note(rows)}


class CellCache:
    """The cells one process has computed, reused when the same record objects come again.

    A cell is a pure function of its rows, their groups' orig rows and the bootstrap settings, so the
    cell of a family test and the same cell of the run's full summary need computing once. An entry
    holds its rows (keeping them alive), and a lookup hits only when every row and orig row is the
    very object it was computed from.
    """

    def __init__(self) -> None:
        self._cells: dict[tuple, tuple[list, list, dict]] = {}

    def cell(self, key: tuple, rows: Sequence[Record], orig: Mapping, compute) -> dict:
        origs = [orig.get(group_key(r)) for r in rows]
        entry = self._cells.get(key)
        if (entry is not None and len(entry[0]) == len(rows) and all(a is b for a, b in zip(entry[0], rows))
                and all(a is b for a, b in zip(entry[1], origs))):
            return entry[2]
        value = compute()
        self._cells[key] = (list(rows), origs, value)
        return value


def _family_cell(decl: Family | None, family: str, dataset: str, rows: list, orig: Mapping, boot: Mapping[str, int],
                 cache: CellCache | None) -> dict:
    """The cell of (family, dataset) in its block, rounded (through ``cache`` when given)."""
    def compute() -> dict:
        if decl is None or decl.block == FLAT:
            cell = flat_cell(rows, orig, family, dataset, boot)
            if decl is not None and decl.cell is not None:
                cell.update(decl.cell(rows, orig, boot))
            return rounded(cell)
        return rounded(block_cell(decl, rows, orig, boot))

    if cache is None:
        return compute()
    return cache.cell((family, dataset, boot["seed"], boot["n_boot"], boot["n_boot_ece"]), rows, orig, compute)


def any_visual_cells(records: Sequence[Record], orig: Mapping, boot: Mapping[str, int]) -> dict:
    """Per dataset with records of a default visual stability family: those records pooled
    (``metrics.stability.any_visual_cell``), with the intervals and standard errors of AV and V."""
    pooled = set(any_families())
    by_dataset: dict[str, list] = defaultdict(list)
    for r in records:
        if r.family in pooled:
            by_dataset[r.dataset].append(r)
    out = {}
    for dataset, rows in sorted(by_dataset.items()):
        clusters, counts = _cell_counts(rows, ANY_VISUAL, dataset, boot, boot["n_boot"])
        out[dataset] = {**any_visual_cell(rows, orig), **uncertainty(STABILITY_HEADLINES, rows, orig, counts, clusters)}
    return out


def _check_int(name: str, value: Any, low: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def summarize(
    records: Iterable[Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    n_boot_ece: int = 400,
    ece_floor_sims: int = 0,
    baseline: Iterable[Mapping[str, Any]] | None = None,
    cache: CellCache | None = None,
) -> dict:
    """The summary of a run: ``{"meta", "bootstrap", "families": {family: {dataset: cell}}}`` plus blocks.

    A pure function of the records (their order does not matter). The unperturbed rows form
    family "orig" (delta 0, flip 0); every other family is paired against its group's orig row.
    ECE uses the records' stored (already calibrated) probs. Each family declared in another block
    than the flat one goes to that block (``{block: {family: {dataset: cell}}}``). With
    ``ece_floor_sims`` > 0, "floor" holds the ECE noise floor (metrics.floor) of every flat cell,
    drawn with ``seed``. "stability_analysis" holds the stability study's one-model analyses of the
    datasets with variants of a family that has a modality (metrics.stability_analysis). With ``baseline`` records (an earlier run's), "baseline" holds the paired
    comparison with them (metrics.baseline). Floats are rounded to 6 d.p.; undefined statistics are None.
    A ``cache`` (:class:`CellCache`) reuses the cells it already holds for the same record objects.
    """
    _check_int("n_boot", n_boot, 1)
    _check_int("n_boot_ece", n_boot_ece, 1)
    _check_int("ece_floor_sims", ece_floor_sims, 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    records = _canonical(records)
    orig = orig_by_group(r for r in records if r.family == ORIG)
    boot = {"seed": seed, "n_boot": n_boot, "n_boot_ece": n_boot_ece}
    out: dict[str, Any] = {"meta": dict(meta or {}), "bootstrap": {**boot, "level": 0.95}, "families": {}}
    for family, by_dataset in sorted(_cells(records).items()):
        decl = find_family(family)
        block = decl.block if decl else FLAT
        cells = out.setdefault(block, {}).setdefault(family, {})
        for dataset, rows in sorted(by_dataset.items()):
            cells[dataset] = _family_cell(decl, family, dataset, rows, orig, boot, cache)
    any_cells = any_visual_cells(records, orig, boot)
    if any_cells:
        out[STABILITY][ANY_VISUAL] = any_cells
    if ece_floor_sims > 0:
        out["floor"] = floor_block(flat_records(records), sims=ece_floor_sims, seed=seed)
    analysis = stability_analysis(records, modalities(), seed=seed)
    if analysis:
        out[STABILITY_ANALYSIS] = analysis
    if baseline is not None:
        from laya_robustness.metrics.baseline import baseline_block

        flip_families = [f for f in sorted({r.family for r in records}) if compares_flips(f)]
        out["baseline"] = baseline_block(records, _canonical(baseline), flip_families=flip_families, seed=seed,
                                         n_boot=n_boot)
    return {k: v if k == "meta" else rounded(v) for k, v in out.items()}


def family_cell(records: Iterable[Mapping[str, Any]], family: str, dataset: str, *, seed: int = 0, n_boot: int = 1000,
                n_boot_ece: int = 400, cache: CellCache | None = None) -> dict:
    """The cell of (family, dataset) alone, as ``summarize`` of the same records would hold it (the records
    must include the orig rows of its groups)."""
    records = _canonical(records)
    orig = orig_by_group(r for r in records if r.family == ORIG)
    rows = [r for r in records if r.family == family and r.dataset == dataset]
    if not rows:
        raise KeyError(f"no records of {family}/{dataset}")
    boot = {"seed": seed, "n_boot": n_boot, "n_boot_ece": n_boot_ece}
    return _family_cell(find_family(family), family, dataset, rows, orig, boot, cache)


def summary_datasets(summary: Mapping[str, Any]) -> list[str]:
    """Every dataset a summary holds a cell of, in any declared block, sorted."""
    return sorted({d for b in blocks() if isinstance(summary.get(b), Mapping)
                   for cells in summary[b].values() if isinstance(cells, Mapping) for d in cells})


def headlines(summary: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[float, list | None]]:
    """``(family, dataset, metric) -> (value, its 95% interval or None)`` of every headline number ``summary`` holds:
    each declared family's headline metrics (``Family.headline``: accuracy, delta and flip rate of the flat
    families; each extension block's own, such as ASR or AV / V) in its block, in declaration order; a metric the
    cell has no value of (orig's delta) is left out."""
    out = {}
    for family in declared():
        for dataset, cell in sorted(summary.get(family.block, {}).get(family.name, {}).items()):
            for key in family.headline_keys:
                value = cell.get(key) if isinstance(cell, Mapping) else None
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[(family.name, dataset, key)] = (float(value), cell.get(f"{key}_ci"))
    return out
