"""The offline commands on a predictions file: its summary re-made (summary.json and the flat table) and the
ECE noise floor table, with no model."""

from __future__ import annotations

import json
from pathlib import Path

from laya_robustness.metrics.floor import floor_block
from laya_robustness.predictions import read_predictions, sibling_meta
from laya_robustness.report.tables import format_floor_table, format_table
from laya_robustness.run.files import atomic_write
from laya_robustness.summary import flat_records, summarize


def summarize_file(predictions_path: str | Path, out_path: str | Path, ece_floor_sims: int = 0) -> int:
    """Summarize a predictions file into ``out_path`` (JSON) and print the tables; returns 0.

    The meta comes from the "meta" key of a ``summary.json`` beside the predictions, if present.
    With ``ece_floor_sims`` > 0 the summary has the "floor" block (seed 0, as the rest).
    """

    predictions_path = Path(predictions_path)
    summary = summarize(read_predictions(predictions_path), sibling_meta(predictions_path),
                        ece_floor_sims=ece_floor_sims)
    atomic_write(Path(out_path), json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(format_table(summary))
    return 0


def print_floor(predictions_path: str | Path, sims: int = 200, seed: int = 0) -> int:
    """Print the ECE noise floor table of a predictions file's flat families; returns 0."""

    if not (isinstance(sims, int) and sims >= 1):
        raise ValueError(f"--sims must be an int >= 1, got {sims!r}")
    block = floor_block(flat_records(read_predictions(predictions_path)), sims=sims, seed=seed)
    print(format_floor_table({"floor": block}))
    return 0
