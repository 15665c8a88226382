"""Usage errors teach: each names its option and says what to type instead, and that suggestion is valid."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from laya_robustness.pytest_plugin.pytest_options import OPTIONS, option, usage_error

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.flag)
def test_what_a_usage_error_says_to_type_is_a_valid_value(opt):
    typed = opt.typed()
    assert typed.split(" ", 1)[0] == opt.flag
    if opt.switch:
        assert typed == opt.flag
    else:
        opt.parse(typed.split(" ", 1)[1])  # raises if the suggestion were itself wrong


def test_a_usage_error_names_the_option_the_problem_and_the_fix():
    text = str(usage_error("--seed", "'abc' is not an integer"))
    first, second = text.splitlines()
    assert first == "--seed: 'abc' is not an integer"
    assert second.strip().startswith("type instead, e.g.: pytest robustness_tests --seed 0")
    assert "docs/errors.md" in second


def test_options_whose_default_is_a_fixture_suggest_something_a_user_would_type():
    assert option("--model").typed() == "--model HuggingFaceTB/SmolVLM-256M-Instruct"
    assert option("--resume").typed() == "--resume"


def test_a_data_file_with_problems_exits_4_naming_every_problem_and_its_fix(tmp_path):
    """The gate run on rows with problems on three lines: exit 4, every problem with its fix and the page of the
    fields, and no "type instead" (the option was typed right; the fix is in the file)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [
        {"row_id": "a", "question": "q?", "options": ["x", "y"], "answer": 0},
        {"row_id": "b", "dataset": "d", "question": "q?", "options": ["x"], "label": 0},
        {"row_id": "c", "dataset": "d", "question": "", "options": ["x", "y"], "label": 3}]) + "\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:randomly", "-q",
                             "-p", "no:cacheprovider", "--data", str(rows), "--report-dir", str(tmp_path / "reports")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 4, result.stderr
    choice_label = "a choice row's 'label': the index of the right option in 'options', from 0"
    expected = [f"ERROR: --data: 5 problems in {rows}:",
                f"  {rows}:1: field 'answer': unknown field",
                "    fix: did you mean 'label' (a choice row's right answer: the index of the right option in "
                "'options', from 0)? (the fields: row_id, dataset, group_id, cluster, images, question, options, "
                "label, primitive, answers, context, category, meta; put anything else under 'meta')",
                f"  {rows}:1: field 'dataset': missing",
                "    fix: 'dataset' is required in every row of a manifest: the name the reports group its rows "
                "under, e.g. \"dataset\": \"rows\"",
                f"  {rows}:2: field 'options': need at least two non-empty strings, got 1",
                "    fix: a choice row's 'options': a list of at least two non-empty texts, in label order",
                f"  {rows}:3: field 'question': empty",
                "    fix: 'question': the question's text, not empty",
                f"  {rows}:3: field 'label': 3 is not an index into 2 options",
                f"    fix: {choice_label}",
                "  the fields each kind of row needs, in each kind of file: docs/data.md#required-fields"]
    lines = result.stderr.splitlines()
    start = lines.index(expected[0])
    assert lines[start:start + len(expected)] == expected
    assert "type instead" not in result.stderr
