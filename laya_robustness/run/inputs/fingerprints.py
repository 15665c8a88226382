"""Short fingerprints of what a run gated: the models' weights and every sampled row with its pixels (the
summary's meta and the snapshot's name carry them)."""

from __future__ import annotations

import hashlib
import json
from typing import Mapping, Sequence

from laya_robustness.families import default_families
from laya_robustness.rows import Row, image_digest

FINGERPRINT_CHARS = 8


def data_fingerprint(rows: Mapping[str, Sequence[Row]]) -> str:
    """A short sha256 of every sampled row's fields and image pixels, datasets and rows in order."""
    h = hashlib.sha256()
    for dataset, dataset_rows in sorted(rows.items()):
        for r in dataset_rows:
            fields = [r.row_id, r.dataset, r.group_id, r.cluster, r.question, list(r.options), r.label,
                      r.primitive, r.context, r.category, dict(r.meta), list(getattr(r, "answers", ()))]
            h.update(json.dumps(fields, sort_keys=True, default=str).encode())
            for image in r.images:
                h.update(image_digest(image).encode())
    return h.hexdigest()[:FINGERPRINT_CHARS]


def model_fingerprint(identity: Mapping, model_name: str, scorer: str) -> str:
    """A short sha256 of the models' weight hashes (the question model's and, under ``"dual"``, the dual
    encoder's); of the model name and scorer when they report none."""
    weights = {"model": identity.get("weights_sha256") or {}, "dual": (identity.get("dual") or {}).get("weights_sha256")}
    basis = json.dumps(weights, sort_keys=True) if any(weights.values()) else f"{scorer}:{model_name}"
    return hashlib.sha256(basis.encode()).hexdigest()[:FINGERPRINT_CHARS]


def families_label(families: Sequence[str]) -> str:
    """"all" for the default families, else their names joined by "+"."""
    return "all" if tuple(families) == default_families() else "+".join(families)
