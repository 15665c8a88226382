"""The stability study's command: the one-model analyses of each predictions file, the cross-model tables of two
or more, and the layerwise divergence of the first (``python -m laya_robustness stability``)."""

from __future__ import annotations

import json
from pathlib import Path

from laya_robustness.analysis.layerwise import layerwise_from_predictions
from laya_robustness.families import get_family, modalities
from laya_robustness.metrics.cross_model import check_same_rows, cross_model_analysis, studied_records
from laya_robustness.metrics.stability_analysis import MODALITIES, stability_analysis
from laya_robustness.predictions import read_predictions, sibling_meta
from laya_robustness.report.stability_tables import format_cross_model, format_layerwise, format_stability
from laya_robustness.run.files import atomic_write
from laya_robustness.scoring.factory import load_scorer


def model_names(paths: list[Path]) -> list[str]:
    """A name per predictions file: its folder's name, or the path itself when two folders share a name."""
    names = [p.parent.name or str(p) for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def parse_modalities(text: str | None) -> dict[str, str | None]:
    """The declared family -> modality mapping, updated by ``"family=modality,..."`` (``none`` removes one)."""

    out = modalities()
    for item in filter(None, (text or "").split(",")):
        family, sep, modality = item.strip().partition("=")
        if not sep or not family or modality not in (*MODALITIES, "none"):
            raise ValueError(f"--modalities: {item!r} is not family=modality with a modality of "
                             f"{', '.join(MODALITIES)} or none")
        out[family] = None if modality == "none" else modality
    return out


def stability_report(paths: list[Path], *, names: list[str] | None = None, modalities: str | None = None,
                     seed: int | None = None, precision: float = 0.92, bins: int | None = None,
                     binning: str = "quantile",
                     with_entropy: bool = False, json_out: Path | None = None, layerwise: dict | None = None) -> int:
    """Print the stability tables of each predictions file and, for two or more, the cross-model tables;
    with ``layerwise`` (model, data, families, scorer, device, max_groups, rows_per_set) the layerwise
    divergence of the first file. ``bins`` is the levels per variable of the mutual-information ratio (None:
    chosen by sample size). ``json_out`` gets every number as JSON. Returns 0."""

    names = names or model_names(paths)
    if len(names) != len(paths) or len(set(names)) != len(names):
        raise ValueError(f"--names: need {len(paths)} distinct names, got {names}")
    modality_of = parse_modalities(modalities)
    seed = seed if seed is not None else int(sibling_meta(paths[0]).get("seed", 0))
    records = {name: read_predictions(path) for name, path in zip(names, paths)}
    check_same_rows(studied_records(records, modality_of))  # the sets the study covers: the same rows in each
    out: dict = {"models": {}}
    for name, recs in records.items():
        out["models"][name] = stability_analysis(recs, modality_of, levels=bins, binning=binning, seed=seed)
        print(format_stability(out["models"][name], name) + "\n")
    if len(records) > 1:
        try:
            out["cross_model"] = cross_model_analysis(records, modality_of, seed=seed, precision=precision,
                                                      with_entropy=with_entropy)
        except ImportError as exc:
            raise ValueError(f"{exc}; the correctness predictor needs scikit-learn: "
                             "pip install 'laya-robustness[analysis]'") from exc
        print(format_cross_model(out["cross_model"]) + "\n")
    if layerwise is not None:
        out["layerwise"] = layerwise_report(paths[0], modality_of=modality_of, **layerwise)
        print(format_layerwise(out["layerwise"]))
    if json_out is not None:
        atomic_write(json_out, json.dumps(out, indent=2, sort_keys=True) + "\n")
    return 0


def layerwise_report(predictions: Path, *, model: str, data: Path, families: list[str], scorer: str = "hf",
                     device: str = "cpu", max_groups: int = 0, seed: int | None = None,
                     rows_per_set: int | None = None, modality_of: dict | None = None) -> dict:
    """The layerwise divergence of a predictions file, its rows re-built from ``data`` and scored by ``model``."""

    for family in families:
        try:
            get_family(family)
        except KeyError as exc:
            raise ValueError(f"--families: {exc.args[0]}") from None
    return layerwise_from_predictions(predictions, data, families, scorer=load_scorer(scorer, model, device=device),
                                      seed=seed, rows_per_set=rows_per_set, max_groups=max_groups,
                                      modality_of=modality_of)
