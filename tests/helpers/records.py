"""Prediction records built by hand, and read back from a report folder's predictions.jsonl.gz."""

import gzip
import json
from pathlib import Path

from laya_robustness.records import ORIG


def record(group: str, family: str, variant: str, *, cluster: str, dataset: str, primitive: str, label: int,
           logits: list, probs: list, argmax: int, **extra) -> dict:
    """A prediction record of ``group``'s row in ``family``/``variant`` (an orig row's id is its group's), ``extra``
    fields after the others."""
    return {"row_id": group if family == ORIG else f"{group}|{family}|{variant}", "group_id": group,
            "cluster": cluster, "dataset": dataset, "family": family, "variant": variant, "primitive": primitive,
            "label": label, "logits": logits, "probs": probs, "argmax": argmax, **extra}


def prediction_lines(folder: Path) -> list[str]:
    """The lines of ``folder``'s predictions.jsonl.gz, as written."""
    with gzip.open(folder / "predictions.jsonl.gz", "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()


def read_records(folder: Path) -> list[dict]:
    """The records of ``folder``'s predictions.jsonl.gz, in order."""
    with gzip.open(folder / "predictions.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def records_by_row(folder: Path) -> dict[str, dict]:
    """The records of ``folder``'s predictions.jsonl.gz by row id."""
    return {r["row_id"]: r for r in read_records(folder)}
