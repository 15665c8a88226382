"""Turn prediction records into the per-family, per-dataset summary dict and its plain-text tables."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from laya_robustness.metrics.accuracy import (
    balanced_accuracy,
    chance_rate,
    flip_rate,
    group_accuracy,
    group_key,
    group_means,
    is_correct,
    majority_rate,
    paired_delta,
    paired_deltas,
)
from laya_robustness.metrics.bootstrap import cluster_index, ece_ci, mean_ci, resample_counts
from laya_robustness.metrics.calibration import ece
from laya_robustness.predictions import check_record, read_predictions

ORIG = "orig"
DIGITS = 6


def _rounded(x: Any) -> Any:
    """Floats rounded to 6 d.p. (never -0.0); lists and dicts recursively; anything else as is."""
    if isinstance(x, float):
        return round(x, DIGITS) + 0.0
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    return x


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


def summarize(
    records: Iterable[Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    n_boot_ece: int = 400,
) -> dict:
    """The summary of a run: ``{"meta", "bootstrap", "families": {family: {dataset: cell}}}``.

    A pure function of the records (their order does not matter). The unperturbed rows form
    family "orig" (delta 0, flip 0); every other family is paired against its dataset's orig rows.
    ECE uses the records' stored (already calibrated) probs. Floats are rounded to 6 d.p.;
    undefined statistics (no scored row, no orig row) are None.
    """
    for name, value in (("n_boot", n_boot), ("n_boot_ece", n_boot_ece)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    cells = _cells(_sorted_records(records))
    boot = {"seed": seed, "n_boot": n_boot, "n_boot_ece": n_boot_ece}
    families = {
        family: {
            dataset: _cell(rows, cells.get(ORIG, {}).get(dataset, []), family, dataset, boot)
            for dataset, rows in sorted(by_dataset.items())
        }
        for family, by_dataset in sorted(cells.items())
    }
    return {"meta": dict(meta or {}), "bootstrap": {**boot, "level": 0.95}, "families": _rounded(families)}


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


def format_table(summary: Mapping[str, Any]) -> str:
    """The flat accuracy table (one row per dataset plus the mean) and the ECE-by-family table.

    An absent family or statistic shows "-"; the mean row is the plain mean over datasets.
    """
    if not summary.get("families"):
        return "no predictions"
    return (
        "Accuracy [95% CI], paired delta vs orig, flip rate\n"
        + _accuracy_table(summary)
        + "\n\nECE by family (point estimates)\n"
        + _ece_table(summary)
    )


def _sibling_meta(predictions_path: Path) -> dict:
    """The "meta" of the summary.json beside the predictions file, or {}."""
    sibling = predictions_path.parent / "summary.json"
    if not sibling.is_file():
        return {}
    data = json.loads(sibling.read_text(encoding="utf-8"))
    meta = data.get("meta") if isinstance(data, dict) else None
    return meta if isinstance(meta, dict) else {}


def run_cli(predictions_path: str | Path, out_path: str | Path) -> int:
    """Summarize a predictions file into ``out_path`` (JSON) and print the tables; returns 0.

    The meta comes from the "meta" key of a ``summary.json`` beside the predictions, if present.
    """
    summary = summarize(read_predictions(predictions_path), _sibling_meta(Path(predictions_path)))
    Path(out_path).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(format_table(summary))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Summarize a predictions.jsonl.gz file.")
    parser.add_argument("predictions")
    parser.add_argument("out")
    args = parser.parse_args()
    sys.exit(run_cli(args.predictions, args.out))
