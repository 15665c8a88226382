"""Synthetic prediction records of models whose stability is related, for the stability analyses' tests.

Every group has a difficulty d shared by all models (keyed on dataset and group) and a per-model part u;
a model's fragility is f = w d + (1 - w) u. The orig answer is right with probability 0.97 - 0.75 f, the
orig confidence falls with f, and each variant's answer leaves the orig answer with probability
``RATE[family] * f^2``. So two models share their unstable samples through d, and unstable samples are
answered wrong more often. Everything is a function of (seed, model, dataset, group) alone.
"""

from __future__ import annotations

import math

from laya_robustness.predictions import write_predictions
from laya_robustness.rng import keyed_rng

from helpers.records import record

#: family -> (modality, number of variants); "text_only" is a control: no modality, left out of the analyses.
FAMILIES = {"shift": ("visual", 4), "pad_crop": ("visual", 4), "rephrase": ("phrasing", 3),
            "language": ("language", 3), "text_only": (None, 1)}
MODALITY_OF = {name: modality for name, (modality, _) in FAMILIES.items()}
RATE = {"shift": 0.5, "pad_crop": 0.4, "rephrase": 0.5, "language": 0.6, "text_only": 1.0}
#: dataset -> (primitive, number of options, categories)
DATASETS = {
    "synth_yesno": ("noul", 2, ("counting", "attributes")),
    "synth_choice": ("choice", 4, ("counting", "spatial", "scene")),
    "synth_open": ("open", 2, ("reading",)),  # 2: only for the discarded logits
}
COLOURS = ("red", "green", "blue", "yellow")


def _probs(k: int, argmax: int, confidence: float) -> list[float]:
    rest = (1.0 - confidence) / (k - 1)
    return [round(confidence if i == argmax else rest, 5) for i in range(k)]


def _record(dataset, i, family, variant, *, answer, label, confidence, primitive, k, category) -> dict:
    group = f"{dataset}/{i:04d}"
    probs = _probs(k, 0 if primitive == "open" else answer, confidence)
    out = record(group, family, variant, cluster=f"{dataset}/img{i // 2:04d}", dataset=dataset, primitive=primitive,
                 label=label, logits=[round(math.log(max(p, 1e-6)), 4) for p in probs], probs=probs,
                 argmax=0 if primitive == "open" else answer, category=category, meta={})
    if primitive == "open":  # as the scorer writes it: the generated text, its normalised form, no logits
        out.update(logits=[], probs=[], argmax=-1, raw_answer=COLOURS[answer].capitalize() + ".",
                   answer=COLOURS[answer], answers=[COLOURS[0]], correct=answer == 0)
    return out


def synthetic_records(model: str, n_groups: int = 120, *, weight: float = 0.8, seed: int = 0,
                      datasets=tuple(DATASETS)) -> list[dict]:
    """The records of one synthetic model: an orig record and the variants of FAMILIES per group.

    ``weight`` is w, the share of fragility that all models have in common (0: unrelated models).
    An open-answer dataset's gold answer is "red" (answer index 0); its records carry the open-answer fields.
    """
    out = []
    for dataset in datasets:
        primitive, k, categories = DATASETS[dataset]
        n_answers = len(COLOURS) if primitive == "open" else k
        for i in range(n_groups):
            shared = keyed_rng(seed, "synthetic", dataset, i)
            own = keyed_rng(seed, "synthetic", model, dataset, i)
            d, u = float(shared.random()) ** 2, float(own.random()) ** 2
            gold = 0 if primitive == "open" else int(shared.integers(k))
            fragility = weight * d + (1.0 - weight) * u
            correct = own.random() < 0.99 - 0.8 * fragility
            wrong = [a for a in range(n_answers) if a != gold]
            answer = gold if correct else int(wrong[own.integers(len(wrong))])
            confidence = min(0.999, max(1.0 / max(k, 2) + 0.01, 0.9 - 0.3 * fragility + 0.1 * own.normal()))
            common = dict(label=-1 if primitive == "open" else gold, primitive=primitive, k=k,
                          category=categories[i % len(categories)])
            out.append(_record(dataset, i, "orig", "orig", answer=answer, confidence=confidence, **common))
            for family, (_, n_variants) in FAMILIES.items():
                for v in range(n_variants):
                    flips = own.random() < RATE[family] * fragility
                    others = [a for a in range(n_answers) if a != answer]
                    a = int(others[own.integers(len(others))]) if flips else answer
                    out.append(_record(dataset, i, family, f"v{v}", answer=a, confidence=confidence, **common))
    return out


def write_models(directory, n_groups: int = 120, models=("model_a", "model_b"), weight: float = 0.8) -> list:
    """One predictions.jsonl.gz per model under ``directory/<model>/``; returns their paths."""
    paths = []
    for model in models:
        folder = directory / model
        folder.mkdir(parents=True, exist_ok=True)
        write_predictions(folder / "predictions.jsonl.gz", synthetic_records(model, n_groups, weight=weight))
        paths.append(folder / "predictions.jsonl.gz")
    return paths
