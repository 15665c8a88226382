"""The options, form and injection blocks of the summary on hand-made prediction records with answers worked out by hand."""

from __future__ import annotations

import math

import pytest

from laya_robustness.summary import summarize

from helpers.records import record


def block(records, name: str) -> dict:
    """One block of the summary of ``records`` ({} when none of its families has a record)."""
    return summarize(records, n_boot=10, n_boot_ece=10).get(name, {})


def options_block(records):
    return block(records, "options")


def form_block(records):
    return block(records, "form")


def injection_block(records):
    return block(records, "injection")


def rec(group: str, family: str, variant: str, probs, label: int, *, primitive="choice", meta=None, logits=None,
        dataset="d", argmax=None) -> dict:
    """A prediction record; logits default to log(probs), argmax to the first largest prob."""
    probs = list(probs)
    return record(group, family, variant, cluster=f"img-{group}", dataset=dataset, primitive=primitive, label=label,
                  logits=list(logits) if logits is not None else [math.log(p) for p in probs], probs=probs,
                  argmax=probs.index(max(probs)) if argmax is None else argmax, meta=meta or {})


def orig(group: str, probs, label: int, **kw) -> dict:
    return rec(group, "orig", "orig", probs, label, **kw)


def noul(group: str, family: str, variant: str, p_yes: float, label: int, **kw) -> dict:
    return rec(group, family, variant, [1 - p_yes, p_yes], label, primitive="noul", **kw)


def approx(d: dict) -> dict:
    return {k: pytest.approx(v, abs=1e-6) if isinstance(v, float) else v for k, v in d.items()}


# --- option_set ----------------------------------------------------------------------------

OPTION_SET = [
    orig("g1", [0.6, 0.3, 0.1], 0, logits=[2.0, 1.0, 0.0]),
    orig("g2", [0.2, 0.6, 0.2], 1, logits=[0.0, 1.0, 0.0]),
    orig("g3", [0.2, 0.5, 0.3], 0, logits=[0.0, 2.0, 1.0]),  # answers a wrong option
    # g1: the distractor (index 3) is picked: a flip; diffs (0,1) 1 -> 0.5, (0,2) 2 -> 2, (1,2) 1 -> 1.5
    rec("g1", "option_set", "add_distractor", [0.3, 0.2, 0.1, 0.4], 0, logits=[2.0, 1.5, 0.0, 3.0],
        meta={"distractor_index": 3, "source_options": [0, 1, 2, None]}),
    # g2: same answer, same differences
    rec("g2", "option_set", "add_distractor", [0.2, 0.5, 0.2, 0.1], 1, logits=[0.0, 1.0, 0.0, -1.0],
        meta={"distractor_index": 3, "source_options": [0, 1, 2, None]}),
    # g1: option 1 dropped; the answer moves to original option 2: a flip; diff (0,2) 2 -> -0.5
    rec("g1", "option_set", "drop_wrong", [0.4, 0.6], 0, logits=[0.5, 1.0], meta={"kept": [0, 2]}),
    # g3: its orig answer (option 1) was dropped: no flip is counted; diff (0,2) -1 -> 1; now right
    rec("g3", "option_set", "drop_wrong", [0.7, 0.3], 0, logits=[1.0, 0.0], meta={"kept": [0, 2]}),
]


def test_option_set_by_hand():
    cell = options_block(OPTION_SET)["option_set"]["d"]
    assert cell["n_rows"] == 4 and list(cell["variants"]) == ["add_distractor", "drop_wrong"]
    assert approx(cell["variants"]["add_distractor"]) == {
        "n_rows": 2, "acc": 0.5, "delta_acc": -0.5, "n_comparable": 2, "n_flipped": 1, "flip_rate": 0.5,
        "logit_diff_shift": (1 / 3 + 0) / 2, "distractor_pick_rate": 0.5,
    }
    assert approx(cell["variants"]["drop_wrong"]) == {
        "n_rows": 2, "acc": 0.5, "delta_acc": 0.0, "n_comparable": 1, "n_flipped": 1, "flip_rate": 1.0,
        "logit_diff_shift": (2.5 + 2.0) / 2,
    }
    # the headline pools both variants: 2 flips over the 3 rows whose orig answer is still offered
    assert cell["n_comparable"] == 3 and cell["flip"] == pytest.approx(2 / 3, abs=1e-6)


def test_option_set_without_orig_rows_has_no_paired_numbers():
    cell = options_block([r for r in OPTION_SET if r["family"] != "orig"])["option_set"]["d"]
    dw = cell["variants"]["drop_wrong"]
    assert dw["acc"] == 0.5 and dw["delta_acc"] is None and dw["flip_rate"] is None and dw["n_comparable"] == 0
    assert cell["flip"] is None and cell["n_comparable"] == 0


def test_option_set_needs_its_meta():
    bad = [*OPTION_SET[:3], rec("g1", "option_set", "drop_wrong", [0.4, 0.6], 0)]
    with pytest.raises(ValueError, match="kept"):
        options_block(bad)


# --- abstain -------------------------------------------------------------------------------


def test_abstain_by_hand():
    recs = [orig(f"g{i}", [0.5, 0.3, 0.2], 0) for i in range(4)]
    drop = [[0.9, 0.1], [0.6, 0.4], [0.5, 0.5], [0.3, 0.3, 0.4]]
    recs += [rec(f"g{i}", "abstain", "drop_gold", p, -1, meta={"no_gold": True}) for i, p in enumerate(drop)]
    none = {"none_index": 3}
    picks = {"add_none": [3, 0, 0, 0], "add_none_shuffled": [3, 3, 1, 3]}
    for variant, argmaxes in picks.items():
        label = 0 if variant == "add_none" else 3
        for i, a in enumerate(argmaxes):
            recs.append(rec(f"g{i}", "abstain", variant, [0.25] * 4, label, meta=none, argmax=a))
    cell = options_block(recs)["abstain"]["d"]
    assert cell["n_rows"] == 12
    assert approx(cell["variants"]["drop_gold"]) == {
        "n_rows": 4, "p_max_mean": (0.9 + 0.6 + 0.5 + 0.4) / 4, "p_max_above_0.5": 0.5, "p_max_above_0.8": 0.25,
    }
    assert cell["variants"]["add_none"] == {"n_rows": 4, "none_pick_rate": 0.25}
    assert cell["variants"]["add_none_shuffled"] == {"n_rows": 4, "none_pick_rate": 0.75}
    assert "option_set" not in options_block(recs)


# --- form_choice ---------------------------------------------------------------------------


def _split(group: str, p_yes: list[float], gold: int, k: int | None = None) -> list[dict]:
    k = len(p_yes) if k is None else k
    return [noul(group, "form_choice", f"as_noul_{i}", p, int(i == gold), meta={"source_option": i, "k": k})
            for i, p in enumerate(p_yes)]


def test_form_choice_by_hand():
    recs = [orig("y1", [0.2, 0.8], 1, primitive="noul"), orig("y2", [0.7, 0.3], 0, primitive="noul"),
            orig("y3", [0.4, 0.6], 1, primitive="noul")]
    recs += [rec(g, "form_choice", "as_choice", [1 - p, p], lab)
             for g, p, lab in (("y1", 0.7, 1), ("y2", 0.45, 0), ("y3", 0.4, 1))]
    recs += [orig("c1", [0.1, 0.2, 0.7], 2), orig("c2", [0.5, 0.3, 0.2], 0), orig("c3", [0.2, 0.6, 0.2], 1),
             orig("c4", [0.6, 0.2, 0.2], 0), orig("c5", [0.6, 0.2, 0.2], 0)]
    recs += _split("c1", [0.2, 0.6, 0.7], 2)  # agrees; two yes
    recs += _split("c2", [0.4, 0.3, 0.1], 0)  # agrees; no yes
    recs += _split("c3", [0.2, 0.9, 0.1], 1)  # agrees; one yes
    recs += _split("c4", [0.1, 0.7, 0.2], 0)  # disagrees; one yes
    recs += _split("c5", [0.9, 0.1], 0, k=3)  # incomplete: left out
    cell = form_block(recs)["form_choice"]["d"]
    assert cell["n_rows"] == 3 + 14
    assert approx(cell["noul_to_choice"]) == {"n_paired": 3, "mean_abs_delta_p_yes": 0.15, "argmax_agreement": 2 / 3}
    assert cell["choice_to_noul"] == {"n_groups": 4, "argmax_agreement": 0.75, "exactly_one_yes": 0.5}


def test_form_choice_unknown_variant_is_an_error():
    recs = [orig("y1", [0.2, 0.8], 1, primitive="noul"), rec("y1", "form_choice", "as_pairs", [0.5, 0.5], 1)]
    with pytest.raises(ValueError, match="as_pairs"):
        form_block(recs)


# --- negation ------------------------------------------------------------------------------

NEGATION = [
    orig("g1", [0.2, 0.8], 1, primitive="noul"),
    orig("g2", [0.7, 0.3], 0, primitive="noul"),
    noul("g1", "negation", "neg_decide", 0.7, 0, meta={"negated": True}),  # s 1.5; same answer; wrong
    noul("g1", "negation", "neg_false", 0.15, 0, meta={"negated": True}),  # s 0.95; opposite; right
    noul("g2", "negation", "neg_decide", 0.75, 1, meta={"negated": True}),  # s 1.05; opposite; right
    noul("g2", "negation", "neg_false", 0.4, 1, meta={"negated": True}),  # s 0.7; same answer; wrong
]


def test_negation_complement_sum_by_hand():
    cell = form_block(NEGATION)["negation"]["d"]
    overall = {k: v for k, v in cell.items() if k not in ("variants", "acc_ci", "acc_se")}
    assert cell["acc_ci"] == [0.5, 0.5] and cell["acc_se"] == 0.0  # both groups are half right in every resample
    assert approx(overall) == {
        "n_rows": 4, "acc": 0.5, "complement_sum_mean": 1.05, "complement_sum_min": 0.7, "complement_sum_max": 1.5,
        "complement_outside": 0.5, "not_opposite_rate": 0.5,
    }
    assert approx(cell["variants"]["neg_decide"]) == {
        "n_rows": 2, "acc": 0.5, "complement_sum_mean": 1.275, "complement_sum_min": 1.05, "complement_sum_max": 1.5,
        "complement_outside": 0.5, "not_opposite_rate": 0.5,
    }
    assert cell["variants"]["neg_false"]["complement_sum_mean"] == pytest.approx(0.825)


def test_a_model_that_reads_the_negation():
    recs = [orig("g1", [0.2, 0.8], 1, primitive="noul"), noul("g1", "negation", "neg_false", 0.2, 0)]
    cell = form_block(recs)["negation"]["d"]
    assert cell["complement_sum_mean"] == 1.0 and cell["complement_outside"] == 0.0
    assert cell["not_opposite_rate"] == 0.0 and cell["acc"] == 1.0


# --- injection -----------------------------------------------------------------------------

INJECTION = [
    orig("g1", [0.7, 0.2, 0.1], 0),
    orig("g2", [0.2, 0.6, 0.2], 1),
    orig("g3", [0.2, 0.3, 0.5], 0),  # already answers the target: not attackable
    orig("g4", [0.6, 0.2, 0.2], 0),
    rec("g1", "inject_text", "blunt", [0.2, 0.2, 0.6], 0, meta={"target": 2}),  # pulled; dP 0.5
    rec("g2", "inject_text", "blunt", [0.3, 0.4, 0.3], 1, meta={"target": 0}),  # resisted; dP 0.1
    rec("g3", "inject_text", "blunt", [0.1, 0.2, 0.7], 0, meta={"target": 2}),  # dP 0.2
    rec("g4", "inject_text", "blunt", [0.3, 0.4, 0.3], 0, meta={"target": 1}),  # pulled; dP 0.2
    rec("g1", "inject_text", "authority", [0.8, 0.1, 0.1], 0, meta={"target": 2}),  # resisted; dP 0
]


def test_attack_success_rate_by_hand():
    cell = injection_block(INJECTION)["inject_text"]["d"]
    assert approx(cell["variants"]["blunt"]) == {
        "n_rows": 4, "acc": 0.25, "delta_acc": -0.5, "n_attackable": 3, "asr": 2 / 3, "delta_p_target": 0.25,
    }
    assert approx(cell["variants"]["authority"]) == {
        "n_rows": 1, "acc": 1.0, "delta_acc": 0.0, "n_attackable": 1, "asr": 0.0, "delta_p_target": 0.0,
    }
    # family level, group-weighted: g1 (0 + 1) / 2, g2 1, g3 0, g4 0 -> 0.375; orig 0.75 on the same groups
    assert approx({k: cell[k] for k in ("n_rows", "acc", "delta_acc")}) == {"n_rows": 5, "acc": 0.375, "delta_acc": -0.375}
    # the headline ASR pools the variants: 2 pulled of the 4 attackable rows
    assert cell["n_attackable"] == 4 and cell["asr"] == pytest.approx(0.5)
    assert "inject_image" not in injection_block(INJECTION)


def test_inject_image_per_dataset():
    recs = [orig("g1", [0.7, 0.3], 1, primitive="noul", dataset="y"), orig("g1", [0.6, 0.3, 0.1], 0, dataset="c")]
    recs += [rec("g1", "inject_image", "typo_center", [0.4, 0.6], 1, primitive="noul", dataset="y", meta={"target": 0}),
             rec("g1", "inject_image", "typo_center", [0.2, 0.7, 0.1], 0, dataset="c", meta={"target": 1})]
    block = injection_block(recs)["inject_image"]
    assert list(block) == ["c", "y"]
    assert block["c"]["variants"]["typo_center"]["asr"] == 1.0
    assert block["y"]["variants"]["typo_center"]["n_attackable"] == 0
    assert block["y"]["variants"]["typo_center"]["asr"] is None


# --- shared behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "block, records",
    [(options_block, OPTION_SET), (form_block, NEGATION), (injection_block, INJECTION)],
)
def test_blocks_are_deterministic_and_rounded(block, records):
    out = block(records)
    assert out and out == block(list(reversed(records)))

    def floats(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from floats(v)
        elif isinstance(x, float):
            yield x

    values = list(floats(out))
    assert values and all(v == round(v, 6) for v in values)


def test_blocks_ignore_other_families_and_empty_input():
    core = [orig("g1", [0.6, 0.4], 0), rec("g1", "text", "prefix", [0.6, 0.4], 0)]
    assert options_block(core) == form_block(core) == injection_block(core) == {}
    assert options_block([]) == {}


def test_invalid_record_is_rejected():
    bad = dict(OPTION_SET[0], argmax=7)
    with pytest.raises(ValueError, match="argmax"):
        options_block([bad])
