"""Layerwise divergence: distances and their per-layer normalisation by hand, a fake scorer with the
``layer_states`` hook, and the offline path that re-builds a run's rows from its data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laya_robustness.__main__ import main
from laya_robustness.analysis.layerwise import layer_distances, layerwise_divergence, normalised_divergence
from laya_robustness.predictions import write_predictions
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.chunks import Scoring

from helpers.fakes import OracleScorer
from helpers.paths import FIXTURE_ROWS

MODALITY_OF = {"shift": "visual", "reph": "phrasing"}


class TableScorer:
    """layer_states from a fixed table of row id -> (n_layers + 1, hidden) array."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def layer_states(self, rows):
        self.calls.append(len(rows))
        return [np.asarray(self.table[r.row_id], dtype=float) for r in rows]


class FakeLayerScorer(OracleScorer):
    """The oracle's logits, and layer states that are a function of the row's question and pixels alone:
    layer l holds (l + 1) (v(question) + mean pixel / 255)."""

    def layer_states(self, rows):
        out = []
        for row in rows:
            v = keyed_rng(0, "fake-layers", row.question).standard_normal(4)
            pixels = float(np.asarray(row.images[0], dtype=float).mean()) / 255 if row.images else 0.0
            out.append(np.stack([(layer + 1) * (v + pixels) for layer in range(3)]))
        return out


def fake_layer_scorer(model, **kwargs):
    return FakeLayerScorer(model)


def row(row_id: str, family: str, group: str = "g") -> Row:
    return Row(row_id=row_id, dataset="d", group_id=group, cluster="c", images=(), question="q?",
               options=("no", "yes"), label=0, primitive="noul", family=family, variant=family)


def record(r: Row, argmax: int) -> dict:
    return {"row_id": r.row_id, "group_id": r.group_id, "cluster": r.cluster, "dataset": r.dataset,
            "family": r.family, "variant": r.variant, "primitive": "noul", "label": 0, "logits": [0.0, 0.0],
            "probs": [0.5, 0.5], "argmax": argmax}


def test_layer_distances_are_the_l2_norm_per_layer():
    a, b = np.zeros((3, 2)), np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    assert layer_distances(a, b).tolist() == [0.0, 5.0, pytest.approx(np.sqrt(2))]
    with pytest.raises(ValueError, match="of one shape"):
        layer_distances(np.zeros((3, 2)), np.zeros((2, 2)))


def test_distances_are_divided_by_the_layers_mean_over_every_pair_of_the_modality():
    out = normalised_divergence([("visual", np.array([0.0, 1.0, 1.0]), False),
                                 ("visual", np.array([0.0, 5.0, 3.0]), True),
                                 ("phrasing", np.array([2.0, 2.0, 2.0]), True)])
    v = out["visual"]
    assert (v["n_layers"], v["n_changed"], v["n_unchanged"]) == (3, 1, 1)
    assert v["mean_distance"] == [0.0, 3.0, 2.0]
    assert v["unchanged"] == [None, pytest.approx(1 / 3), 0.5]  # layer 0 never moves: no normalisation
    assert v["changed"] == [None, pytest.approx(5 / 3), 1.5]
    assert v["gap"] == [None, pytest.approx(4 / 3), 1.0]
    p = out["phrasing"]
    assert (p["changed"], p["unchanged"], p["gap"]) == ([1.0, 1.0, 1.0], None, None)


def test_layerwise_divergence_pairs_each_perturbed_row_with_its_orig_row():
    o, p1, p2, p3 = row("g", "orig"), row("g|s1", "shift"), row("g|s2", "shift"), row("g|r1", "reph")
    scorer = TableScorer({"g": np.zeros((3, 2)), "g|s1": [[0, 0], [1, 0], [0, 1]], "g|s2": [[0, 0], [3, 4], [0, 3]],
                          "g|r1": [[2, 0], [0, 2], [2, 0]]})
    records = [record(o, 0), record(p1, 0), record(p2, 1), record(p3, 1)]
    out = layerwise_divergence(scorer, [o], [p1, p2, p3], records, MODALITY_OF, batch_size=3)
    assert out["n_pairs"] == 3 and scorer.calls == [3, 1]
    assert out["modalities"]["visual"]["gap"] == [None, pytest.approx(4 / 3), 1.0]
    assert out["modalities"]["phrasing"]["changed"] == [1.0, 1.0, 1.0]


def test_layerwise_divergence_names_what_is_missing():
    o, p = row("g", "orig"), row("g|s1", "shift")
    table = {"g": np.zeros((3, 2)), "g|s1": np.ones((3, 2))}
    with pytest.raises(ValueError, match="row g\\|s1 \\(d\\) has no prediction record"):
        layerwise_divergence(TableScorer(table), [o], [p], [record(o, 0)], MODALITY_OF)
    with pytest.raises(ValueError, match="has no layer_states\\(rows\\) method"):
        layerwise_divergence(OracleScorer("m"), [o], [p], [record(o, 0), record(p, 0)], MODALITY_OF)
    with pytest.raises(ValueError, match="perturbed row x has no orig row of group 'h'"):
        layerwise_divergence(TableScorer(table), [o], [row("x", "shift", "h")],
                             [record(o, 0), record(row("x", "shift", "h"), 0)], MODALITY_OF)


# -- the offline path ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """predictions.jsonl.gz and summary.json of an oracle run of text and image on 3 fixture rows per set."""
    from laya_robustness.families import build_variants

    folder = tmp_path_factory.mktemp("run")
    rows = []
    for source in load_source_rows(FIXTURE_ROWS, 3, 0).values():
        rows += source
        for family in ("text", "image"):
            rows += build_variants(family, source, 0)
    write_predictions(folder / "predictions.jsonl.gz", Scoring(OracleScorer("m")).records(rows))
    (folder / "summary.json").write_text(json.dumps({"meta": {"seed": 0, "rows_per_set": 3}}), encoding="utf-8")
    return folder, len(rows)


def test_the_offline_layerwise_path_rebuilds_the_rows_with_the_runs_seed(run_dir, tmp_path, capsys):
    folder, n_rows = run_dir
    out = tmp_path / "out.json"
    rc = main(["stability", str(folder / "predictions.jsonl.gz"), "--layerwise", "--model", "m", "--data",
               str(FIXTURE_ROWS), "--families", "text,image", "--scorer", "test_layerwise:fake_layer_scorer",
               "--modalities", "text=phrasing,image=visual", "--json", str(out)])
    assert rc == 0
    assert "Layerwise divergence from the orig sample (Fig. 4)" in capsys.readouterr().out
    result = json.loads(out.read_text())["layerwise"]
    assert (result["seed"], result["rows_per_set"], result["families"]) == (0, 3, ["text", "image"])
    assert result["n_pairs"] == n_rows - 15  # every row but the 5 x 3 orig rows
    for name in ("visual", "phrasing"):
        m = result["modalities"][name]
        n = m["n_changed"] + m["n_unchanged"]
        for layer in range(3):  # the normalised distances of all pairs average 1 on every layer
            parts = [(m["changed"], m["n_changed"]), (m["unchanged"], m["n_unchanged"])]
            total = sum(values[layer] * k for values, k in parts if values is not None)
            assert total / n == pytest.approx(1.0)
    # visual pairs keep the question: the fake's states move with the pixels only
    assert result["modalities"]["visual"]["mean_distance"][2] == pytest.approx(
        3 * result["modalities"]["visual"]["mean_distance"][0])


def test_rows_the_predictions_do_not_hold_are_a_usage_error(run_dir, capsys):
    folder, _ = run_dir
    rc = main(["stability", str(folder / "predictions.jsonl.gz"), "--layerwise", "--model", "m", "--data",
               str(FIXTURE_ROWS), "--families", "text", "--rows-per-set", "5",
               "--scorer", "test_layerwise:fake_layer_scorer"])
    assert rc == 4
    assert "re-built from" in capsys.readouterr().err
    assert main(["stability", str(folder / "predictions.jsonl.gz"), "--layerwise", "--model", "m"]) == 4
    assert "--layerwise needs --data, --families" in capsys.readouterr().err
    assert main(["stability", str(folder / "predictions.jsonl.gz"), "--layerwise", "--model", "m", "--data",
                 str(FIXTURE_ROWS), "--families", "txet"]) == 4
    assert "unknown family 'txet'; did you mean text" in capsys.readouterr().err
