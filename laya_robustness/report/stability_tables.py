"""Plain-text tables of the stability analyses in the stability paper's layouts: Fig. 3 (stable shares and the
entropy histogram), Table 5 (by category), Table 7 (accuracy given stability), Table 8 (correlations), the
conditional mutual information ratio, Table 6 (Matthews correlation across models), Fig. 6 (the
correctness predictor) and Fig. 4 (layerwise divergence)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from laya_robustness.metrics.stability_analysis import MODALITIES, SHORT, TABLE7_TYPES
from laya_robustness.report.tables import render

TITLES = {"visual": "Visual", "phrasing": "Phrasing", "language": "Language", "visual+phrasing": "V+P",
          "all": "All", "confidence": "Conf"}


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def _shares(block: Mapping[str, Any]) -> str:
    shares = block["stable_shares"]
    types = [t for t in ("visual", "phrasing", "language", "visual+phrasing", "all") if shares[t]["n_samples"]]
    rows = [["stable under", *(SHORT[t] for t in types)],
            ["share", *(_num(shares[t]["share"]) for t in types)],
            ["samples", *(str(shares[t]["n_samples"]) for t in types)]]
    return "Stable samples (Fig. 3): H = 0 over the orig answer and every variant of the type\n" + render(rows)


def _histogram(block: Mapping[str, Any]) -> str:
    hist = block["entropy_histogram"]
    modalities = [m for m in MODALITIES if m in hist["counts"]]
    edges = hist["edges"]
    rows = [["H (nats)", *modalities]]
    for i, hi in enumerate(edges):
        label = "0" if i == 0 else f"({edges[i - 1]:g}, {hi:g}]"
        rows.append([label, *(str(hist["counts"][m][i]) for m in modalities)])
    return "Answer entropy per sample (Fig. 3): samples per bin\n" + render(rows)


def _categories(block: Mapping[str, Any]) -> str:
    table = block["by_category"]
    cats = table["categories"]
    rows = [["type", *cats, "avg", "all"]]
    for name, t in table["types"].items():
        rows.append([name, *(_num(t["by_category"][c]) for c in cats), _num(t["mean_over_categories"]),
                     _num(t["all_samples"])])
    return ("Share of samples affected by at least one variant, by question category (Table 5; avg: mean over "
            "categories, all: over every sample)\n" + render(rows))


def _accuracy(block: Mapping[str, Any]) -> str:
    acc = block["accuracy_given_stability"]
    types = [t for t in TABLE7_TYPES if acc["types"][t]["n_samples"]]
    rows = [["", *(TITLES[t] for t in types)],
            ["P(acc | stable)", *(f"{_num(acc['types'][t]['acc_stable'])} ({_signed(acc['types'][t]['lift'])})"
                                  for t in types)],
            ["P(acc | unstable)", *(_num(acc["types"][t]["acc_unstable"]) for t in types)],
            ["prevalence", *(_num(acc["types"][t]["prevalence"]) for t in types)]]
    return (f"Orig accuracy given stability (Table 7; baseline {_num(acc['baseline'])} over {acc['n_samples']} "
            "samples; in brackets: the change from the accuracy of the same samples)\n" + render(rows))


def _correlations(block: Mapping[str, Any]) -> str:
    corr = block["correlations"]
    names = [TITLES[v] for v in corr["variables"]]
    rows = [["", *names]] + [[names[i], *(_num(v, 2) for v in row)] for i, row in enumerate(corr["matrix"])]
    return ("Correlation over samples of stability (1 = stable) and orig confidence (Table 8; Pearson: the phi "
            "coefficient between two stabilities, point-biserial with confidence)\n" + render(rows))


def _interval(ci) -> str:
    return "-" if ci is None else f"[{_num(ci[0], 3)}, {_num(ci[1], 3)}]"


def _cmi(block: Mapping[str, Any]) -> str:
    cmi = block["cmi"]
    if not cmi["pairs"]:
        return "Conditional mutual information (Sec. 5.2.1): needs visual and a textual modality"
    sizes = sorted({b for p in cmi["pairs"].values() for b in p["sensitivity"]}, key=int)
    rows = [["H_V with", "samples", "levels", "I(H_V;H_T)", "I(H_V;H_T|C)", "ratio [95% CI]", "plug-in ratio",
             *(f"@ {b} levels" for b in sizes)]]
    notes = []
    for t, p in cmi["pairs"].items():
        ratio = f"{_num(p['ratio'])} {_interval(p['ratio_ci'])}" if p["readable"] else f"{_num(p['ratio'])} (unread)"
        rows.append([f"H_{SHORT[t]} ({t})", str(p["n_samples"]), str(p["levels"] or "-"), _num(p["mi"], 4),
                     _num(p["cmi"], 4), ratio, _num(p["plugin"]["ratio"]),
                     *(_sensitivity(p["sensitivity"].get(b)) for b in sizes)])
        if not p["readable"]:
            notes.append(f"H_{SHORT[t]}: the ratio cannot be read: {p['unreadable']}")
    return ("Conditional mutual information ratio I(H_V;H_T|C) / I(H_V;H_T) (Sec. 5.2.1; chance-adjusted "
            f"estimates, {cmi['binning']} levels; the plug-in ratio beside it is biased on few samples)\n"
            + render(rows) + "".join(f"\n{n}" for n in notes))


def _sensitivity(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "-"
    return _num(entry["ratio"]) + ("" if entry["readable"] else " (unread)")


def format_stability(analysis: Mapping[str, Any], model: str = "") -> str:
    """Every one-model table of :func:`~laya_robustness.metrics.stability_analysis.stability_analysis`."""
    if not analysis:
        return f"== {model or 'stability'}: no dataset has variants of a family with a modality =="
    parts = []
    for dataset, block in analysis.items():
        families = "; ".join(f"{m}: {', '.join(fs)}" for m, fs in block["families"].items())
        head = f"== {model + ': ' if model else ''}{dataset} ({block['n_samples']} samples; {families}) =="
        parts.append("\n\n".join([head, _shares(block), _histogram(block), _categories(block), _accuracy(block),
                                  _correlations(block), _cmi(block)]))
    return "\n\n".join(parts)


def _mcc(dataset: str, modality: str, m: Mapping[str, Any]) -> str:
    rows = [["model", *m["models"]]] + [[a, *(_num(v, 2) for v in row)] for a, row in zip(m["models"], m["matrix"])]
    return f"Matthews correlation of {modality} stability across models (Table 6): {dataset}\n" + render(rows)


def _reading(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["recall"] is None:
        return f"not reached (best precision {_num(r['best_precision'])})"
    return _num(r["recall"])


def _predictors(dataset: str, predictors: Sequence[Mapping[str, Any]]) -> str:
    if not predictors:
        return ""
    precision = predictors[0]["precision"]
    rows = [["source -> target", "features", "train / test", "target acc (test)",
             f"recall @ {precision:g} precision: stability", "target confidence",
             "confidence precision @ that recall"]]
    for p in predictors:
        r = p["result"]
        head = [f"{p['source']} -> {p['target']}", str(len(p["features"])), f"{p['n_train']} / {p['n_test']}",
                _num(p["target_acc_test"])]
        if r is None:
            rows.append([*head, f"no fit: {p['reason']}", "-", "-"])
        else:
            rows.append([*head, _reading(r["predictor"]), _reading(r["confidence"]),
                         _num(r["confidence_precision_at_predictor_recall"])])
    return (f"Correctness predictor (Fig. 6): logistic regression on the source's stability per family, "
            f"predicting the target's orig correctness: {dataset}\n" + render(rows))


def format_cross_model(cross: Mapping[str, Any]) -> str:
    """Table 6 (per modality) and the Fig. 6 predictor of every dataset of
    :func:`~laya_robustness.metrics.cross_model.cross_model_analysis`."""
    parts = []
    for dataset, block in cross["datasets"].items():
        parts += [_mcc(dataset, m, v) for m, v in block["mcc"].items()]
        parts.append(_predictors(dataset, block["predictors"]))
    return "\n\n".join(p for p in parts if p)


def format_layerwise(result: Mapping[str, Any]) -> str:
    """Fig. 4 as a table: per modality and layer, the mean normalised distance of unchanged and changed pairs."""
    parts = ["Layerwise divergence from the orig sample (Fig. 4): per-layer L2 distance of the hidden state at the "
             "last prompt position, divided by the layer's mean over every pair of the modality"]
    for name, m in result["modalities"].items():
        rows = [["layer", "unchanged", "changed", "gap", "mean L2"]]
        for layer in range(m["n_layers"]):
            def at(values):
                return None if values is None else values[layer]
            rows.append([str(layer), _num(at(m["unchanged"])), _num(at(m["changed"])), _signed(at(m["gap"])),
                         _num(m["mean_distance"][layer], 4)])
        parts.append(f"{name}: {m['n_changed'] + m['n_unchanged']} pairs ({m['n_changed']} changed the answer, "
                     f"{m['n_unchanged']} did not)\n" + render(rows))
    return "\n\n".join(parts)
