"""One route per parameter: an option given as a Python value (``run_gate``'s and the callback's arguments) is
checked as that value, never rendered to option text to be parsed again, and gives the settings its text gives;
a model loaded in memory is a source of the model in the settings, not a way around them."""

import functools
from pathlib import Path

import pytest

from laya_robustness.run.errors import UsageError
from laya_robustness.run.inputs import options as options_module
from laya_robustness.run.inputs.options import OPTIONS, InMemoryModel, option, parse_settings

ROOT = Path(__file__).resolve().parents[2]

#: Each kind of option, as text and as the Python value that means the same.
SAME = [
    ("--families", "option_order,text", ["option_order", "text"]),
    ("--families", "option_order", ("option_order",)),
    ("--seed", "3", 3),
    ("--rows-per-set", "0", 0),
    ("--temperatures", "choice=2.5,noul=1.5", {"choice": 2.5, "noul": 1.5}),
    ("--request-timeout", "12.5", 12.5),
    ("--resume", "yes", True),
    ("--keep-freed-memory", "no", False),
    ("--allow-outside-data", "yes", True),
    ("--data-map", "question=prompt,options=choices", {"question": "prompt", "options": "choices"}),
    ("--max-image-pixels", "1000000", 1_000_000),
    ("--thresholds", "thresholds.toml", Path("thresholds.toml")),
    ("--report-dir", "out", Path("out")),
    ("--baseline", "none", None),
    ("--journal", "auto", None),
    ("--ray-actors", "auto", None),
]


@pytest.mark.parametrize(("flag", "text", "value"), SAME, ids=[f"{f}={t}" for f, t, _ in SAME])
def test_a_python_value_gives_the_settings_its_text_gives(flag, text, value):
    assert parse_settings({flag: value}, root=ROOT) == parse_settings({flag: text}, root=ROOT)


def test_a_python_value_is_never_rendered_to_text():
    parsed: list[tuple[str, str]] = []
    typed_values = dict(options_module.TYPED_VALUES)
    originals = {opt.flag: opt.parse for opt in OPTIONS}
    for opt in OPTIONS:  # every text parse is seen (the spy keeps the parser's bound and its typed check)
        spy = functools.wraps(opt.parse)(lambda text, parse=opt.parse, flag=opt.flag: parsed.append((flag, text))
                                         or parse(text))
        typed_values[spy] = typed_values.get(opt.parse)
        object.__setattr__(opt, "parse", spy)
    given = {flag: value for flag, _, value in SAME if value is not None and not isinstance(value, Path)}
    saved, options_module.TYPED_VALUES = options_module.TYPED_VALUES, {k: v for k, v in typed_values.items() if v}
    try:
        settings = parse_settings(given, root=ROOT)
    finally:
        options_module.TYPED_VALUES = saved
        for opt in OPTIONS:
            object.__setattr__(opt, "parse", originals[opt.flag])
    assert settings.families == ("option_order",) and settings.resume is True and settings.seed == 3
    assert settings.temperatures == {"choice": 2.5, "noul": 1.5, "score": 1.0}
    assert [flag for flag, _ in parsed if flag in given] == []
    assert len(parsed) == len(OPTIONS) - len(given)  # the options left out: their default texts, parsed


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--families", ["option_order", "nope"], "--families: unknown family 'nope'"),
    ("--families", ["text", "text"], "--families: a family is named twice in ['text', 'text']"),
    ("--families", [], "--families: no family given"),
    ("--families", 3, "--families: 3 is not a list of family names"),
    ("--batch-size", True, "--batch-size: True is not an integer"),
    ("--batch-size", 0, "--batch-size: 0 is below 1"),
    ("--seed", 1.5, "--seed: 1.5 is not an integer"),
    ("--resume", "maybe", "--resume: 'maybe' is not yes or no"),
    ("--resume", 1, "--resume: 1 is not yes or no (True or False)"),
    ("--temperatures", {"choice": -1}, "--temperatures: the temperature of choice must be a finite number > 0, got -1"),
    ("--temperatures", {"chioce": 2.0}, "--temperatures: unknown primitive 'chioce'"),
    ("--temperatures", "choice=x", "--temperatures: 'choice=x' is not primitive=number"),
    ("--temperatures", [("choice", 2.0)], "--temperatures: [('choice', 2.0)] is not a mapping"),
    ("--data-map", {"questoin": "prompt"}, "--data-map: unknown row field 'questoin'; did you mean 'question'?"),
    ("--request-timeout", float("inf"), "--request-timeout: inf is not a number of seconds > 0"),
    ("--device", 0, "--device: 0 is not text (a int)"),
    ("--ray-actors", 0, "--ray-actors: 0 is below 1"),
])
def test_a_bad_python_value_is_a_usage_error_naming_the_option_and_why(flag, value, words):
    with pytest.raises(UsageError) as caught:
        parse_settings({flag: value}, root=ROOT)
    assert str(caught.value).startswith(words), str(caught.value)


class _Model:
    name_or_path = "my/checkpoint"


def test_a_model_in_memory_is_a_source_of_the_model_in_the_settings():
    source = InMemoryModel(_Model(), processor="its processor")
    settings = parse_settings({"--model": source, "--limitations": "none"}, root=ROOT)
    assert settings.in_memory is source and settings.model is None and settings.model_name == "my/checkpoint"
    assert InMemoryModel(object(), None).name == "in-memory"
    with pytest.raises(UsageError, match="--scorer: 'openai': a model loaded in memory is scored by the hf scorer"):
        parse_settings({"--model": source, "--scorer": "openai", "--endpoint": "http://127.0.0.1:1/v1"}, root=ROOT)
    # only --model takes an object as it is
    assert option("--model").objects == (InMemoryModel,)
    assert all(not o.objects for o in OPTIONS if o.flag != "--model")


def test_parsing_the_options_reads_nothing_from_the_disk(monkeypatch):
    """``typed_values`` is pure: with every way of reading a path broken, it still gives every option's value; the
    disk is read by ``resolution.resolve`` alone (a checkpoint's directory, the weights a limitations file names)."""
    def no_disk(*args, **kwargs):
        raise AssertionError("the options' parsing read the disk")

    given = {"--model": "/no/such/checkpoint", "--data": "rows", "--limitations": "my-limits.toml",
             "--journal": "rows/journal", "--dual-model": "./no/dual"}
    for name in ("exists", "is_dir", "is_file", "resolve", "stat", "open", "read_bytes", "read_text"):
        monkeypatch.setattr(Path, name, no_disk)
    monkeypatch.setattr("builtins.open", no_disk)
    values = options_module.typed_values(given, root=ROOT)
    monkeypatch.undo()
    assert values["model"] == "/no/such/checkpoint" and values["data"] == ROOT / "rows"
    assert values["limitations"] == "my-limits.toml" and values["dual_model"] == "./no/dual"
    with pytest.raises(UsageError, match="--model: no directory /no/such/checkpoint"):
        parse_settings(given, root=ROOT)


def test_the_callback_s_settings_for_its_model_go_through_the_one_constructor():
    """At each evaluation the Trainer callback's settings are those of its model in memory, every option given again
    to ``parse_settings``: the same as the settings it started with apart from the model and what it changed, and a
    changed value is checked as ``run_gate``'s arguments are."""
    start = parse_settings({"--limitations": "none", "--dual-model": "none", "--seed": 3}, root=ROOT,
                           model_given=False)
    source = InMemoryModel(_Model(), processor="its processor")
    settings = options_module.settings_for_model(start, source, root=ROOT, report_dir=Path("/tmp/at-step-2"),
                                                 device="cpu", executor="local")
    assert settings.in_memory is source and settings.model is None and settings.model_name == "my/checkpoint"
    assert settings.report_dir == Path("/tmp/at-step-2") and settings.seed == 3
    # the model in memory is not the embedded default's, whatever the settings started with
    assert start.is_embedded("model") and not settings.is_embedded("model") and settings.is_embedded("data")
    with pytest.raises(UsageError, match="--device"):
        options_module.settings_for_model(start, source, root=ROOT, device="tpu")
