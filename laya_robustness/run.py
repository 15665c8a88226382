"""One gate run's data work: sample the source rows and score rows into prediction records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence, TypeVar

from laya_robustness.loaders import LoadSettings, scan_rows
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES
from laya_robustness.records import prediction_record
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

RowLike = TypeVar("RowLike")  # a Row, or a loader's SourceRow (row_id, dataset, load())


def sample_rows(rows: Sequence[RowLike], n: int, seed: int) -> list[RowLike]:
    """``n`` rows drawn without replacement with ``keyed_rng(seed, "sample", dataset)``, in row-id order.

    ``n <= 0`` or ``n >= len(rows)`` keeps every row. Only ``row_id`` and ``dataset`` are read, so
    the loaders' not-yet-decoded rows are sampled the same way as rows.
    """
    ordered = sorted(rows, key=lambda r: r.row_id)
    if n <= 0 or n >= len(ordered):
        return ordered
    pick = keyed_rng(seed, "sample", ordered[0].dataset).choice(len(ordered), size=n, replace=False)
    return [ordered[i] for i in sorted(pick)]


def load_source_rows(data: str | Path, rows_per_set: int, seed: int,
                     settings: LoadSettings | None = None) -> dict[str, list[Row]]:
    """The sampled source rows of every dataset under ``data``, by dataset name (sorted).

    Every row is validated and every image checked from its header first; only the sampled
    rows' pixels are decoded. Raises RowError for bad data, FileNotFoundError for none.
    """
    scanned = scan_rows(data, settings)
    return {name: [row.load() for row in sample_rows(rows, rows_per_set, seed)]
            for name, rows in sorted(scanned.items())}


@dataclass
class Scoring:
    """How rows are scored: the scorer, its path and the per-primitive temperatures."""

    scorer: object
    path: str = "batch"  # or "predict"
    temperatures: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TEMPERATURES))

    def logits(self, rows: Sequence[Row]):
        """Logits of every row: one batch-path call, or one predict call per image cluster."""
        if self.path == "batch":
            return self.scorer.score_batch(rows)
        out = [None] * len(rows)
        for idx in cluster_indices(rows):
            for i, logits in zip(idx, self.scorer.score_predict([rows[i] for i in idx])):
                out[i] = logits
        return out

    def records(self, rows: Sequence[Row]) -> list[dict]:
        """One prediction record per row (logits 4 d.p., calibrated probs 5 d.p., argmax)."""
        return [prediction_record(r, lg, self.temperatures) for r, lg in zip(rows, self.logits(rows))]


def cluster_indices(rows: Sequence[Row]) -> list[list[int]]:
    """Indices of the rows grouped by image cluster, clusters in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.cluster, []).append(i)
    return list(groups.values())
