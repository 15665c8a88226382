"""Usage errors teach: each names its option and says what to type instead, and that suggestion is valid."""

import pytest

from laya_robustness.pytest_plugin.options import OPTIONS, option, usage_error


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
