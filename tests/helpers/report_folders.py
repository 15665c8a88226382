"""Report folders made for the report tests: a small run of the fake oracle scorer on every default family, its
``checkpoint-<step>/`` folders as training writes them, and synthetic reports of orig records alone."""

import json
from pathlib import Path

from laya_robustness.families import build_variants, default_families, get_family
from laya_robustness.predictions import write_predictions
from laya_robustness.recipes.fixture_rows import SET_NAMES, generate_rows, write_manifest
from laya_robustness.records import ORIG
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.summary import summarize

from helpers.fakes import OracleScorer

#: The seed of ``make_run``'s rows and variants.
SEED = 3
#: The checkpoints' steps and the oracle's margin at each (steps 2, 4, 6: a default locator ticks 2.5, 3, ...).
MARGINS = {2: 0.3, 4: 1.0, 6: 2.0}
#: Rows per dataset of a synthetic report (``write_folder``).
N = 30


def make_run(folder: Path, margin: float = 1.0, n_rows: int = 12) -> dict:
    """Rows on disk, every default family scored by the oracle, predictions.jsonl.gz + summary.json written."""
    data = folder / "rows"
    for name in SET_NAMES:
        write_manifest(generate_rows(name, n_rows, seed=5), data)
    source = load_source_rows(data, 0, SEED)
    scoring = Scoring(OracleScorer("fake-model", margin=margin))
    records = []
    for family in (ORIG, *(f for f in default_families() if get_family(f).source == "rows")):
        for rows in source.values():
            records += scoring.records(rows if family == ORIG else build_variants(family, rows, SEED))
    meta = {"seed": SEED, "rows_per_set": 0, "data": str(data), "model": {"model": "fake-model"}, "device": "cpu",
            "datasets": {name: len(rows) for name, rows in source.items()}}
    summary = summarize(records, meta=meta, seed=SEED, n_boot=60, n_boot_ece=30)
    out = folder / "reports"
    out.mkdir(parents=True)
    write_predictions(out / "predictions.jsonl.gz", records)
    (out / "summary.json").write_text(json.dumps(summary))
    return {"data": data, "source": source, "records": records, "summary": summary, "out": out}


def make_checkpoints(base: Path, margins: dict[int, float] = MARGINS) -> list[Path]:
    """``checkpoint-<step>/`` folders (predictions and summary) of one set of rows, the oracle's margin per step."""
    folders = []
    for step, margin in margins.items():
        run = make_run(base / f"run-{step}", margin=margin)
        folders.append(run["out"].rename(base / f"checkpoint-{step}"))
    return folders


def orig_records(right: dict[str, float]) -> list[dict]:
    """The orig records of each dataset, the first ``share`` of its rows answered right (two options, label 0)."""
    out = []
    for dataset, share in right.items():
        for i in range(N):
            ok = i < share * N
            out.append({"row_id": f"r{i}", "group_id": f"g{i}", "cluster": f"c{i}", "dataset": dataset,
                        "family": ORIG, "variant": ORIG, "primitive": "choice", "label": 0, "argmax": 0 if ok else 1,
                        "logits": [1.0, 0.0] if ok else [0.0, 1.0],
                        "probs": [0.73106, 0.26894] if ok else [0.26894, 0.73106]})
    return out


def write_folder(folder: Path, right: dict[str, float], decisions: dict[str, str] | None = None,
                 model: str = "tiny") -> Path:
    """A report folder as a gate run writes it (predictions, summary.json made from them, checks.json with a
    ``min_acc`` decision per dataset of ``decisions``)."""
    recs = orig_records(right)
    folder.mkdir(parents=True)
    write_predictions(folder / "predictions.jsonl.gz", recs)
    meta = {"seed": 0, "rows_per_set": 0, "model": {"model": model}, "device": "cpu"}
    (folder / "summary.json").write_text(json.dumps(summarize(recs, meta, n_boot=100, n_boot_ece=20)))
    results = [{"device": "cpu", "family": ORIG, "dataset": d, "check": "min_acc", "decision": decision}
               for d, decision in (decisions or {}).items()]
    (folder / "checks.json").write_text(json.dumps({"results": results}))
    return folder
