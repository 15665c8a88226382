"""One gate run's data work: sample the source rows and score rows into prediction records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence, TypeVar

from laya_robustness.loaders import LoadSettings, scan_rows
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES
from laya_robustness.records import OPEN, open_record, prediction_record
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
    max_new_tokens: int = 16

    def logits(self, rows: Sequence[Row]):
        """Logits of every row: one batch-path call, or one predict call per image cluster."""
        if self.path == "batch":
            return self.scorer.score_batch(rows)
        out = [None] * len(rows)
        for idx in cluster_indices(rows):
            for i, logits in zip(idx, self.scorer.score_predict([rows[i] for i in idx])):
                out[i] = logits
        return out

    def answers(self, rows: Sequence[Row]) -> list[str]:
        """The generated answers of open-answer rows (the scorer's greedy ``generate``)."""
        generate = getattr(self.scorer, "generate", None)
        if generate is None:
            raise TypeError(f"{type(self.scorer).__name__} cannot generate: open-answer rows need a scorer "
                            "with generate(rows, max_new_tokens)")
        return list(generate(rows, max_new_tokens=self.max_new_tokens))

    def records(self, rows: Sequence[Row]) -> list[dict]:
        """One prediction record per row, in order: logits (4 d.p.), calibrated probs (5 d.p.) and argmax of
        a choice / yes-no row; the generated, normalised and judged answer of an open-answer row."""
        out: list = [None] * len(rows)
        closed = [i for i, r in enumerate(rows) if r.primitive != OPEN]
        opened = [i for i, r in enumerate(rows) if r.primitive == OPEN]
        if closed:
            logits = self.logits([rows[i] for i in closed])
            for i, lg in zip(closed, logits, strict=True):
                out[i] = prediction_record(rows[i], lg, self.temperatures)
        if opened:
            for i, text in zip(opened, self.answers([rows[i] for i in opened]), strict=True):
                out[i] = open_record(rows[i], text)
        return out


def cluster_indices(rows: Sequence[Row]) -> list[list[int]]:
    """Indices of the rows grouped by image cluster, clusters in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.cluster, []).append(i)
    return list(groups.values())
