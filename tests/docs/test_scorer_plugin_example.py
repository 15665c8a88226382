"""The docs' plug-in example (docs/plugins.md) is real: it loads through --scorer, meets the contract and its invariances."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from laya_robustness.families import build_variants
from laya_robustness.run.pipeline.invariance import ConditionNotSupported, InvarianceRun
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES
from laya_robustness.scoring import load_scorer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    import sys

    import torch

    text = PAGE.read_text()
    code = re.search(r"<!-- plugin-example:[^\n]*-->\n```python\n(.*?)```", text, re.S).group(1)
    root = tmp_path_factory.mktemp("plugin")
    (root / "laya_plugin_example.py").write_text(code)
    sys.path.insert(0, str(root))
    try:
        import laya_plugin_example

        with torch.random.fork_rng():
            torch.manual_seed(0)
            head = laya_plugin_example.BlockOptionHead()
        (root / "ckpt").mkdir()
        torch.save(head.state_dict(), root / "ckpt" / "head.pt")
        yield load_scorer("laya_plugin_example:factory", str(root / "ckpt"), device="cpu", batch_size=4)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("laya_plugin_example", None)


@pytest.fixture(scope="module")
def rows(fixture_rows):
    return fixture_rows["colour_choice"][:4] + fixture_rows["exists_yesno"][:2]


def test_the_example_loads_and_scores_in_label_order(plugin, rows):
    variants = build_variants("option_order", rows[:2], seed=0)
    by_id = {r.row_id: r for r in rows}
    for v, logits in zip(variants, plugin.score_batch(variants)):
        source = by_id[v.group_id]
        moved = dataclasses.replace(source, options=tuple(source.options[i] for i in v.display_order),
                                    display_order=None)
        # the head never lets options see each other, so the order they are shown in changes nothing
        np.testing.assert_allclose(logits, plugin.score_batch([source])[0], atol=1e-5)
        np.testing.assert_allclose(logits[list(v.display_order)], plugin.score_batch([moved])[0], atol=1e-5)
    assert len({tuple(np.round(lg, 4)) for lg in plugin.score_batch(rows)}) > 1
    assert plugin.stats["rows"] > 0 and plugin.identity["head"] == "block option attention"


def test_the_example_holds_the_gates_invariances(plugin, rows):
    run = InvarianceRun(plugin, rows, batch_size=4, temperatures=dict(DEFAULT_TEMPERATURES))
    assert run.run("repeat_batch")["bitwise"]
    for condition in ("batched", "hostile", "predict_all_questions", "prefix_cache_one"):
        stats = run.run(condition)
        assert stats["max_abs_dlogit"] < 1e-4 and stats["flips"] == 0, condition
    assert run.run("bf16_weights")["precision"] == "bf16"
    with pytest.raises(ConditionNotSupported):
        run.run("one_pass_vs_per_option")
