"""Turn prediction records into the per-family, per-dataset summary dict and its plain-text tables.

The core families (orig and the meaning-preserving perturbations) form ``"families"``. The six
opt-in extension families change the option set, the question type or the label meaning, or are
adversarial, so the accuracy/flip table would misread them: each is summarised in its own block
(``"options"``, ``"form"``, ``"injection"``, see EXTENSION_BLOCKS), and the optional ``"floor"``
block holds the ECE noise floor of the core families.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.metrics import rounded
from laya_robustness.metrics.accuracy import (
    balanced_accuracy,
    chance_rate,
    flip_rate,
    group_accuracy,
    group_key,
    group_means,
    is_correct,
    majority_rate,
    orig_by_group,
    paired_delta,
    paired_deltas,
)
from laya_robustness.metrics.bootstrap import cluster_index, ece_ci, mean_ci, resample_counts
from laya_robustness.metrics.calibration import ece
from laya_robustness.metrics.extensions import form_block, injection_block, options_block
from laya_robustness.metrics.floor import SIMS, floor_block
from laya_robustness.predictions import check_record, read_predictions

ORIG = "orig"

#: extension family -> the summary block it is summarised in (kept out of "families").
EXTENSION_BLOCKS = {
    "option_set": "options",
    "abstain": "options",
    "form_choice": "form",
    "negation": "form",
    "inject_text": "injection",
    "inject_image": "injection",
}
_BLOCK_FUNCTIONS = {"options": options_block, "form": form_block, "injection": injection_block}


def _sorted_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Validated records in a canonical order; duplicate row ids and split clusters are errors."""
    out = [check_record(r, f"record {i}") for i, r in enumerate(records)]
    out.sort(key=lambda r: (r["dataset"], r["family"], r["group_id"], r["variant"], r["row_id"]))
    seen: set[tuple[str, str]] = set()
    clusters: dict[tuple[str, str], str] = {}
    for r in out:
        if (r["dataset"], r["row_id"]) in seen:
            raise ValueError(f"row_id {r['row_id']!r} occurs more than once in dataset {r['dataset']!r}")
        seen.add((r["dataset"], r["row_id"]))
        if clusters.setdefault(group_key(r), r["cluster"]) != r["cluster"]:
            raise ValueError(f"group {r['group_id']!r} spans clusters {clusters[group_key(r)]!r} and {r['cluster']!r}")
    return out


def _cells(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list]]:
    """records split by family, then dataset (order kept)."""
    cells: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cells[r["family"]][r["dataset"]].append(r)
    return cells


def _intervals(rows: list, orig: list, family: str, dataset: str, seed: int, n_boot: int, n_boot_ece: int) -> dict:
    """acc_ci, delta_ci (same resamples) and ece_ci (the first n_boot_ece of them) of one cell."""
    clusters = cluster_index(r["cluster"] for r in rows)
    counts = resample_counts(seed, family, dataset, len(clusters), max(n_boot, n_boot_ece))
    cluster_of = {group_key(r): clusters[r["cluster"]] for r in rows}
    means, deltas = group_means(rows), paired_deltas(rows, orig)
    scored = [r for r in rows if r["label"] >= 0]
    return {
        "acc_ci": mean_ci(counts[:n_boot], [cluster_of[g] for g in means], list(means.values())),
        "delta_ci": mean_ci(counts[:n_boot], [cluster_of[g] for g in deltas], list(deltas.values())),
        "ece_ci": ece_ci(
            counts[:n_boot_ece],
            [clusters[r["cluster"]] for r in scored],
            [max(r["probs"]) for r in scored],
            [is_correct(r) for r in scored],
        ),
    }


def _variants(rows: list, orig: list) -> dict:
    """Point estimates per variant, each on the variant's rows only."""
    names = sorted({r["variant"] for r in rows})
    out = {}
    for name in names:
        sub = [r for r in rows if r["variant"] == name]
        out[name] = {
            "acc": group_accuracy(sub),
            "delta": paired_delta(sub, orig),
            "flip": flip_rate(sub, orig),
            "n_rows": len(sub),
        }
    return out


def _cell(rows: list, orig: list, family: str, dataset: str, boot: Mapping[str, int]) -> dict:
    """Every statistic of one (family, dataset) cell; ``orig`` holds that dataset's unperturbed rows."""
    scored = [r for r in rows if r["label"] >= 0]
    return {
        "n_groups": len({group_key(r) for r in rows}),
        "n_rows": len(rows),
        "acc": group_accuracy(rows),
        "delta": paired_delta(rows, orig),
        "flip": flip_rate(rows, orig),
        "ece": ece([max(r["probs"]) for r in scored], [is_correct(r) for r in scored]) if scored else None,
        "balanced_acc": balanced_accuracy(rows),
        "chance": chance_rate(rows, orig),
        "majority": majority_rate(rows, orig),
        "variants": _variants(rows, orig),
        **_intervals(rows, orig, family, dataset, boot["seed"], boot["n_boot"], boot["n_boot_ece"]),
    }


def _pooled_asr(rows: Sequence[Mapping[str, Any]], orig: Mapping[Any, Mapping[str, Any]]) -> dict:
    """ASR over all variants: mean [argmax == meta.target] over paired rows whose orig argmax is not the target."""
    hits = [
        r["argmax"] == int(r["meta"]["target"])
        for r in rows
        if group_key(r) in orig and orig[group_key(r)]["argmax"] != int(r["meta"]["target"])
    ]
    return {"n_attackable": len(hits), "asr": sum(hits) / len(hits) if hits else None}


def _pooled_flip(cell: Mapping[str, Any]) -> float | None:
    """Flips over all variants of an option_set cell: sum of n_flip / sum of the rows each rate counted."""
    flips = counted = 0
    for v in cell.get("variants", {}).values():
        if v.get("flip_rate"):
            flips += v["n_flip"]
            counted += v["n_flip"] / v["flip_rate"]
        elif v.get("flip_rate") == 0:
            counted += v.get("n", 0)
    return flips / counted if counted else None


def _with_headline(block: dict, records: Sequence[Mapping[str, Any]]) -> dict:
    """Each extension cell with the headline metrics the gate checks, where the block lacks them.

    "acc": group-weighted accuracy of the family's rows with a label (every extension family);
    "asr" and "n_attackable": the attack success rate pooled over all variants (injection);
    "flip": flips in label space pooled over the variants (option_set).
    """
    orig = orig_by_group(r for r in records if r["family"] == ORIG)
    out: dict[str, dict] = {}
    for family, by_dataset in block.items():
        out[family] = {}
        for dataset, cell in by_dataset.items():
            rows = [r for r in records if r["family"] == family and r["dataset"] == dataset]
            extra = {"acc": group_accuracy(rows)}
            if EXTENSION_BLOCKS[family] == "injection":
                extra.update(_pooled_asr(rows, orig))
            if family == "option_set":
                extra["flip"] = _pooled_flip(cell)
            out[family][dataset] = {**extra, **cell}
    return out


def _extension_blocks(records: Sequence[Mapping[str, Any]]) -> dict:
    """``{"options" | "form" | "injection": block}`` for each block that has records of its families.

    Each block is computed on its families' records plus the orig records (for pairing).
    """
    orig = [r for r in records if r["family"] == ORIG]
    out = {}
    for name, block_of in sorted(_BLOCK_FUNCTIONS.items()):
        rows = [r for r in records if EXTENSION_BLOCKS.get(r["family"]) == name]
        if rows:
            block = block_of(rows + orig)
            out[name] = _with_headline(block, rows + orig)
    return out


def _check_int(name: str, value: Any, low: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def core_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of the families that go into "families" (orig included, extension families left out)."""
    return [r for r in records if r["family"] not in EXTENSION_BLOCKS]


def summarize(
    records: Iterable[Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    n_boot_ece: int = 400,
    ece_floor_sims: int = 0,
) -> dict:
    """The summary of a run: ``{"meta", "bootstrap", "families": {family: {dataset: cell}}}`` plus blocks.

    A pure function of the records (their order does not matter). The unperturbed rows form
    family "orig" (delta 0, flip 0); every other core family is paired against its dataset's orig
    rows. ECE uses the records' stored (already calibrated) probs. The extension families
    (EXTENSION_BLOCKS) are left out of "families"; when any of their records exist, the blocks
    "options", "form" and "injection" hold them (metrics.extensions, paired with the orig rows),
    and every injection cell has an "asr" over all its variants. With ``ece_floor_sims`` > 0,
    "floor" holds the ECE noise floor (metrics.floor) of every "families" cell, drawn with ``seed``.
    Floats are rounded to 6 d.p.; undefined statistics (no scored row, no orig row) are None.
    """
    _check_int("n_boot", n_boot, 1)
    _check_int("n_boot_ece", n_boot_ece, 1)
    _check_int("ece_floor_sims", ece_floor_sims, 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    records = _sorted_records(records)
    core = core_records(records)
    cells = _cells(core)
    boot = {"seed": seed, "n_boot": n_boot, "n_boot_ece": n_boot_ece}
    families = {
        family: {
            dataset: _cell(rows, cells.get(ORIG, {}).get(dataset, []), family, dataset, boot)
            for dataset, rows in sorted(by_dataset.items())
        }
        for family, by_dataset in sorted(cells.items())
    }
    out = {"meta": dict(meta or {}), "bootstrap": {**boot, "level": 0.95}, "families": families}
    out.update(_extension_blocks(records))
    if ece_floor_sims > 0:
        out["floor"] = floor_block(core, sims=ece_floor_sims, seed=seed)
    return {k: v if k == "meta" else rounded(v) for k, v in out.items()}


def summary_cell(summary: Mapping[str, Any], family: str, dataset: str) -> Mapping[str, Any]:
    """The cell of (family, dataset): from "families", or from the extension block that holds the family.

    Raises KeyError naming the family, dataset and block when the summary has no such cell.
    """
    block = EXTENSION_BLOCKS.get(family, "families")
    try:
        return summary[block][family][dataset]
    except KeyError:
        raise KeyError(f"summary has no cell {family}/{dataset} (looked in {block!r})") from None


#: (family, header, statistics shown as "a / b / c") for the flat accuracy table, in the reference's order.
ACC_COLUMNS = (
    ("option_order", "option order: acc / delta / flip", ("acc", "delta", "flip")),
    ("text", "text: acc / delta / flip", ("acc", "delta", "flip")),
    ("image", "image: acc / delta / flip", ("acc", "delta", "flip")),
    ("image_shuffle", "shuffled image: acc / delta", ("acc", "delta")),
    ("text_only", "no image: acc / delta", ("acc", "delta")),
)
ECE_COLUMNS = (
    ("orig", "orig"),
    ("option_order", "order"),
    ("text", "text"),
    ("image", "image"),
    ("image_shuffle", "shuffled"),
    ("text_only", "no image"),
)


def _num(value: float | None, key: str = "acc") -> str:
    """3 d.p.; deltas signed; None as "-"."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if key == "delta" else f"{value:.3f}"


def _stats(cell: Mapping[str, Any] | None, keys: Sequence[str]) -> str:
    return "-" if cell is None else " / ".join(_num(cell.get(k), k) for k in keys)


def _orig_acc(cell: Mapping[str, Any] | None) -> str:
    if cell is None or cell.get("acc") is None:
        return "-"
    ci = cell.get("acc_ci")
    return _num(cell["acc"]) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _mean_stats(cells: Sequence[Mapping[str, Any] | None], keys: Sequence[str]) -> str:
    """Per statistic, the mean over datasets; "-" unless every dataset has it."""
    if all(c is None for c in cells):
        return "-"
    parts = []
    for k in keys:
        values = [None if c is None else c.get(k) for c in cells]
        parts.append("-" if None in values else _num(sum(values) / len(values), k))
    return " / ".join(parts)


def _render(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def _datasets(summary: Mapping[str, Any]) -> list[str]:
    return sorted({d for cells in summary["families"].values() for d in cells})


def _accuracy_table(summary: Mapping[str, Any]) -> str:
    fams, datasets = summary["families"], _datasets(summary)
    rows = [["dataset", "orig acc [95% CI]"] + [h for _, h, _ in ACC_COLUMNS] + ["chance / majority"]]
    for d in datasets:
        orig = fams.get(ORIG, {}).get(d)
        cols = [_stats(fams.get(f, {}).get(d), keys) for f, _, keys in ACC_COLUMNS]
        rows.append([d, _orig_acc(orig), *cols, _stats(orig, ("chance", "majority"))])
    mean = [_mean_stats([fams.get(f, {}).get(d) for d in datasets], keys) for f, _, keys in ACC_COLUMNS]
    orig_mean = _mean_stats([fams.get(ORIG, {}).get(d) for d in datasets], ("acc",))
    rows.append([f"mean of {len(datasets)}", orig_mean, *mean, ""])
    return _render(rows)


def _ece_table(summary: Mapping[str, Any]) -> str:
    fams = summary["families"]
    rows = [["dataset"] + [h for _, h in ECE_COLUMNS]]
    for d in _datasets(summary):
        rows.append([d] + [_stats(fams.get(f, {}).get(d), ("ece",)) for f, _ in ECE_COLUMNS])
    return _render(rows)


#: (family, ASR header, variants) of the injection table's family columns, in the reference's order.
INJECTION_COLUMNS = (
    ("inject_image", "typo ASR (corner / centre)", ("typo_corner", "typo_center")),
    ("inject_text", "text ASR (blunt / authority / context)", ("blunt", "authority", "context")),
)
FLOOR_MARK = "*"


def _rate(value: float | None) -> str:
    """2 d.p. as in the reference's injection table; None as "-"."""
    return "-" if value is None else f"{value:.2f}"


def _asrs(cell: Mapping[str, Any] | None, variants: Sequence[str]) -> str:
    if cell is None:
        return "-"
    return " / ".join(_rate(cell.get("variants", {}).get(v, {}).get("asr")) for v in variants)


def format_injection_table(summary: Mapping[str, Any]) -> str:
    """Per dataset: orig acc, inject_image acc, typo ASR (corner / centre), inject_text acc, text ASR
    (blunt / authority / context). Accuracies at 3 d.p., ASRs at 2; an absent cell or variant shows "-".
    """
    block = summary.get("injection") or {}
    if not block:
        return "no injection families"
    orig = summary.get("families", {}).get(ORIG, {})
    header = ["dataset", "orig acc"]
    for family, asr_header, _ in INJECTION_COLUMNS:
        header += [f"{family} acc", asr_header]
    rows = [header]
    for d in sorted({d for cells in block.values() for d in cells}):
        row = [d, _stats(orig.get(d), ("acc",))]
        for family, _, variants in INJECTION_COLUMNS:
            cell = block.get(family, {}).get(d)
            row += [_stats(cell, ("acc",)), _asrs(cell, variants)]
        rows.append(row)
    return _render(rows)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_floor_table(summary: Mapping[str, Any]) -> str:
    """Per dataset and family (orig first): ECE, floor mean, floor p95, clustered p95, ECE / floor.

    An ECE above both p95s (beyond sampling noise for a calibrated model) is marked with "*".
    """
    block = summary.get("floor") or {}
    if not block:
        return "no ECE floor (summarize with ece_floor_sims > 0)"
    rows = [["dataset", "family", "ECE", "floor mean", "floor p95", "clustered p95", "ECE / floor"]]
    cells = sorted((d, f != ORIG, f) for f, by_dataset in block.items() for d in by_dataset)
    for d, _, f in cells:
        c = block[f][d]
        mark = FLOOR_MARK if c["ece"] > c["floor_p95"] and c["ece"] > c["clustered_p95"] else ""
        numbers = [_num(c[k]) for k in ("floor_mean", "floor_p95", "clustered_p95")]
        rows.append([d, f, _num(c["ece"]) + mark, *numbers, _ratio(c["ratio"])])
    return _render(rows) + f"\n{FLOOR_MARK} ECE above both p95s: miscalibrated beyond sampling noise"


def format_table(summary: Mapping[str, Any]) -> str:
    """The flat accuracy table (one row per dataset plus the mean) and the ECE-by-family table,
    then the injection table and the ECE floor table when the summary has those blocks.

    An absent family or statistic shows "-"; the mean row is the plain mean over datasets.
    """
    parts = []
    if summary.get("families"):
        parts.append("Accuracy [95% CI], paired delta vs orig, flip rate\n" + _accuracy_table(summary))
        parts.append("ECE by family (point estimates)\n" + _ece_table(summary))
    if summary.get("injection"):
        parts.append("Injection: accuracy and attack success rate (ASR)\n" + format_injection_table(summary))
    if summary.get("floor"):
        parts.append("ECE noise floor (calibrated redraws)\n" + format_floor_table(summary))
    return "\n\n".join(parts) if parts else "no predictions"


def _sibling_meta(predictions_path: Path) -> dict:
    """The "meta" of the summary.json beside the predictions file, or {}."""
    sibling = predictions_path.parent / "summary.json"
    if not sibling.is_file():
        return {}
    data = json.loads(sibling.read_text(encoding="utf-8"))
    meta = data.get("meta") if isinstance(data, dict) else None
    return meta if isinstance(meta, dict) else {}


def run_cli(predictions_path: str | Path, out_path: str | Path, ece_floor_sims: int = 0) -> int:
    """Summarize a predictions file into ``out_path`` (JSON) and print the tables; returns 0.

    The meta comes from the "meta" key of a ``summary.json`` beside the predictions, if present.
    With ``ece_floor_sims`` > 0 the summary has the "floor" block (seed 0, as the rest).
    """
    summary = summarize(
        read_predictions(predictions_path), _sibling_meta(Path(predictions_path)), ece_floor_sims=ece_floor_sims
    )
    Path(out_path).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(format_table(summary))
    return 0


def run_floor_cli(predictions_path: str | Path, sims: int = SIMS, seed: int = 0) -> int:
    """Print the ECE noise floor table of a predictions file's core families; returns 0."""
    _check_int("sims", sims, 1)
    block = floor_block(core_records(read_predictions(predictions_path)), sims=sims, seed=seed)
    print(format_floor_table({"floor": block}))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Summarize a predictions.jsonl.gz file.")
    parser.add_argument("predictions")
    parser.add_argument("out")
    parser.add_argument("--ece-floor-sims", type=int, default=0)
    args = parser.parse_args()
    sys.exit(run_cli(args.predictions, args.out, args.ece_floor_sims))
