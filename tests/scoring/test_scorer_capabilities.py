"""What a scorer can do, probed once (``scoring.base.capabilities``), for the built-in scorers and any plug-in; and
no class of ``laya_robustness/scoring/`` is over 300 lines (its ``class`` line to its last)."""

import ast
from pathlib import Path


from laya_robustness.scoring.base import ScorerCapabilities, answers_in_text, capabilities
from laya_robustness.scoring.served import ServedScorer

from helpers.fakes import OracleScorer

ROOT = Path(__file__).resolve().parents[2]
MAX_CLASS_LINES = 300


def test_the_hf_scorer_can_do_everything_the_run_asks_of_a_scorer(embedded_scorer):
    able = capabilities(embedded_scorer)
    assert able == ScorerCapabilities(generates=True, per_option=True, unshared=True, shares_prefixes=True,
                                      prefix_sharing=embedded_scorer.identity["prefix_sharing"], casts_weights=True,
                                      replaceable=True, layer_states=True, forget_images=True, stats=True)
    assert capabilities(embedded_scorer) is able  # probed once
    off = embedded_scorer.replaced(prefix_cache_bytes=0, precision="bf16")
    assert not capabilities(off).shares_prefixes and capabilities(off).batch_precision == "bf16"


def test_a_plug_in_that_declares_nothing_is_probed_for_what_it_has():
    able = capabilities(OracleScorer("m"))
    assert able == ScorerCapabilities() and able.probabilities and not able.answers_in_text


def test_a_served_model_answers_in_text_with_probabilities_only_where_its_server_gives_them():
    served = ServedScorer("http://127.0.0.1:9/v1", concurrency=3)  # never connected: nothing is asked of it
    able = capabilities(served)
    assert able.answers_in_text and answers_in_text(served) and able.concurrency == 3
    assert able.generates and not able.probabilities and able.stats and not able.per_option
    rich = ServedScorer("http://127.0.0.1:9/v1")
    rich.probabilities = True  # as ``connect`` sets it where the server returns top_logprobs
    assert capabilities(rich).probabilities and capabilities(rich).concurrency == 8


class _Slotted:
    """A scorer without weak references (``__slots__``): probed on every call, never kept."""

    __slots__ = ("identity",)

    def __init__(self):
        self.identity = {"model": "slotted"}

    def score_batch(self, rows):
        return []

    def score_predict(self, rows, use_cache=True):
        return []

    def layer_states(self, rows):
        return []


def test_a_scorer_without_weak_references_is_probed_every_time():
    scorer = _Slotted()
    assert capabilities(scorer).layer_states and capabilities(scorer) == capabilities(scorer)


def test_no_scoring_class_is_over_300_lines():
    long = {}
    for path in sorted((ROOT / "laya_robustness" / "scoring").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long[f"{path.relative_to(ROOT)}::{node.name}"] = node.end_lineno - node.lineno + 1
    assert long == {}, f"classes over {MAX_CLASS_LINES} lines: {long}"
