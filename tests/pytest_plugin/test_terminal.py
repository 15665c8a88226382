"""The end of a run: caption rows stay out of the question tables, what failed is one line with its numbers, and a
line a person reads is wrapped to the terminal's width."""

from laya_robustness.gate.results import CheckResult
from laya_robustness.pytest_plugin.terminal import problem_lines
from laya_robustness.report.cell_rows import NO_CHECK, cell_rows, cell_verdicts

CELL = {"acc": 0.5, "n_rows": 10}
SUMMARY = {"families": {"orig": {"colour_choice": CELL, "shape_captions": {"acc": None, "n_rows": 400}}},
           "lgip": {"lgip_paraphrase": {"shape_captions": {"e_inv": 0.08, "n_rows": 400}}}}


def test_a_question_familys_cell_on_caption_rows_is_not_shown_in_the_question_table():
    rows = cell_rows(SUMMARY, {}, "families")
    assert [(r.family, r.dataset) for r in rows] == [("orig", "colour_choice")]
    assert [(r.family, r.dataset) for r in cell_rows(SUMMARY, {}, "lgip")] == [("lgip_paraphrase", "shape_captions")]


def test_a_checked_cell_on_caption_rows_is_shown_whatever_its_rows():
    failed = CheckResult("orig", "shape_captions", "min_acc", False, 0.1, 0.3, None, "acc 0.1 < min_acc 0.3")
    verdicts = cell_verdicts([failed], lambda *_: None)
    shown = [(r.family, r.dataset, r.verdict is not NO_CHECK) for r in cell_rows(SUMMARY, verdicts, "families")]
    assert ("orig", "shape_captions", True) in shown


def test_what_failed_and_what_newly_passes_is_one_line_each_with_its_numbers():
    results = [CheckResult("option_order", "colour_choice", "max_flip", False, 0.25, 0.1, (0.2, 0.3),
                           "flip 0.25 [0.2, 0.3] > max_flip 0.1"),
               CheckResult("text", "colour_choice", "max_flip", True, 0.01, 0.1, None, "flip 0.01 <= max_flip 0.1"),
               CheckResult("image", "count_choice", "max_drop", True, 0.0, 0.05, None, "drop 0 <= max_drop 0.05")]
    known = {("text", "colour_choice", "max_flip"): "fixed upstream"}
    lines = problem_lines(cell_verdicts(results, lambda *key: known.get(key)))
    assert lines == ["FAIL option_order/colour_choice max_flip: flip 0.25 [0.2, 0.3] > max_flip 0.1",
                     "XPASS text/colour_choice max_flip: flip 0.01 <= max_flip 0.1 (a known limitation that now "
                     "passes: remove it from the limitations file)"]


def test_a_line_a_person_reads_is_wrapped_to_the_terminals_width_and_joins_back():
    from types import SimpleNamespace

    from laya_robustness.pytest_plugin.terminal import write_wrapped
    from laya_robustness.report.wrapping import INDENT, unwrap

    written = []
    reporter = SimpleNamespace(_tw=SimpleNamespace(fullwidth=60), write_line=lambda line, **m: written.append((line, m)))
    line = ("XPASS text/colour_choice max_flip: flip 0.01 <= max_flip 0.1 (a known limitation that now passes: "
            "remove it from the limitations file)")
    write_wrapped(reporter, line, red=True)
    assert len(written) == 3 and all(len(w) < 60 and m == {"red": True} for w, m in written)
    assert all(w.startswith(INDENT) for w, _ in written[1:]) and unwrap(w for w, _ in written) == [line]
    write_wrapped(reporter, "verdicts: 1 FAIL")
    assert written[-1] == ("verdicts: 1 FAIL", {})
