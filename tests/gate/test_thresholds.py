"""load_thresholds: a valid file round trip, the override merge, known limitations, and every error case."""

import re
from pathlib import Path

import pytest

from laya_robustness.gate.limits_file import KnownLimitation, ThresholdsError, load_thresholds

FAMILIES = ("orig", "option_order", "text", "image", "image_shuffle", "text_only", "inject_text")
DATASETS = ("exists_yesno", "left_of_yesno", "colour_choice", "count_choice", "context_choice")
CONDITIONS = ("repeat", "batched", "prefix_cache")

VALID = """\
version = 1

[families.text]
max_flip = 0.10
max_drop = 0.05

[families.text.datasets.count_choice]
max_flip = 0.2
min_acc = 0

[families.image_shuffle]
min_gap = 0.15

[families.orig]
min_acc = 0.5
max_ece = 0.2

[families.inject_text]
max_asr = 1

[invariance.repeat]
bitwise = true

[invariance.batched]
max_abs_dp = 1e-5
max_abs_dlogit = 1e-4
max_flips = 0

[[known_limitations]]
family = "image_shuffle"
dataset = "left_of_yesno"
check = "min_gap"
reason = "  the fixture model answers left_of from the question text  "
"""


def write(tmp_path: Path, text: str, name: str = "limits.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(path, families=None):
    return load_thresholds(path, families=FAMILIES if families is None else families, datasets=DATASETS,
                           conditions=CONDITIONS)


def error(tmp_path: Path, text: str) -> ThresholdsError:
    path = write(tmp_path, text)
    with pytest.raises(ThresholdsError) as info:
        load(path)
    assert str(path) in str(info.value), "the message must name the file"
    return info.value


# ------------------------------------------------------------------------------------------- valid file


def test_valid_file_round_trip(tmp_path):
    path = write(tmp_path, VALID)
    t = load(path)
    assert t.path == path
    assert t.families == ("image_shuffle", "inject_text", "orig", "text")
    assert t.conditions == ("batched", "repeat")
    assert t.limits_for("text", "exists_yesno") == {"max_flip": 0.10, "max_drop": 0.05}
    assert t.limits_for("image_shuffle", "left_of_yesno") == {"min_gap": 0.15}
    assert t.limits_for("orig", "colour_choice") == {"min_acc": 0.5, "max_ece": 0.2}
    # ints are accepted where a number is expected and come back as floats
    assert t.limits_for("inject_text", "exists_yesno") == {"max_asr": 1.0}
    assert type(t.limits_for("inject_text", "exists_yesno")["max_asr"]) is float
    assert t.invariance_limits("repeat") == {"bitwise": True}
    assert t.invariance_limits("batched") == {"max_abs_dp": 1e-5, "max_abs_dlogit": 1e-4, "max_flips": 0}
    assert type(t.invariance_limits("batched")["max_flips"]) is int


def test_dataset_override_merges_over_family_defaults(tmp_path):
    t = load(write(tmp_path, VALID))
    merged = t.limits_for("text", "count_choice")
    assert merged == {"max_flip": 0.2, "max_drop": 0.05, "min_acc": 0.0}
    assert list(merged) == ["max_flip", "max_drop", "min_acc"]  # evaluation order, not file order
    assert t.limits_for("text", "colour_choice") == {"max_flip": 0.10, "max_drop": 0.05}  # others untouched
    merged["max_flip"] = 9.0  # a copy: the Thresholds cannot be changed through it
    assert t.limits_for("text", "count_choice")["max_flip"] == 0.2


def test_override_only_family(tmp_path):
    t = load(write(tmp_path, "version = 1\n[families.image.datasets.count_choice]\nmax_flip = 0.3\n"))
    assert t.families == ("image",)
    assert t.limits_for("image", "count_choice") == {"max_flip": 0.3}
    assert t.limits_for("image", "exists_yesno") == {}


def test_known_family_without_limits_gives_empty_and_unknown_name_raises(tmp_path):
    t = load(write(tmp_path, VALID))
    assert t.limits_for("image", "exists_yesno") == {}
    assert t.invariance_limits("prefix_cache") == {}
    with pytest.raises(KeyError, match="did you mean 'image'"):
        t.limits_for("imag", "exists_yesno")
    with pytest.raises(KeyError, match="unknown dataset 'vsr'"):
        t.limits_for("text", "vsr")
    with pytest.raises(KeyError, match="unknown invariance condition"):
        t.invariance_limits("repaet")


def test_known_limitation_lookup(tmp_path):
    t = load(write(tmp_path, VALID))
    expected = KnownLimitation(
        "image_shuffle", "left_of_yesno", "min_gap", "the fixture model answers left_of from the question text"
    )
    assert t.known_limitation("image_shuffle", "left_of_yesno", "min_gap") == expected
    assert t.known_limitations == (expected,)
    assert t.known_limitation("image_shuffle", "exists_yesno", "min_gap") is None
    assert t.known_limitation("text", "left_of_yesno", "min_gap") is None
    assert t.known_limitation("image_shuffle", "left_of_yesno", "max_flip") is None


def _declared_checks():
    from laya_robustness.families import declared

    return {f.name: f.checks for f in declared()}


def test_repo_thresholds_file_holds_release_limits_for_any_data():
    from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS

    path = Path(__file__).resolve().parents[2] / "thresholds.toml"
    t = load_thresholds(path, families=_declared_checks(), datasets=["my_photos"], conditions=INVARIANCE_CONDITIONS)
    assert {"orig", "option_order", "text", "image", "image_shuffle", "text_only"} <= set(t.families)
    assert t.limits_for("orig", "my_photos") == {"min_acc_over_chance": 0.25}
    assert t.invariance_limits("repeat_batch") == {"bitwise": True}
    settings = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert t.known_limitations == () and not any("datasets" in line for line in settings)


def test_fixture_overlay_declares_the_embedded_defaults_misses():
    from laya_robustness.recipes.fixture_rows import SET_NAMES
    from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS

    root = Path(__file__).resolve().parents[2]
    t = load_thresholds(root / "thresholds.toml", families=_declared_checks(), datasets=SET_NAMES,
                        conditions=INVARIANCE_CONDITIONS, overlays=[root / "laya_fixtures" / "limitations.toml"])
    assert t.overlays == (root / "laya_fixtures" / "limitations.toml",)
    assert t.known_limitations and all(len(k.reason) > 20 for k in t.known_limitations)
    assert t.known_limitation("image_shuffle", "left_of_yesno", "min_gap") is not None
    assert t.known_limitation("orig", "exists_yesno", "min_acc_over_chance") is not None


OVERLAY = """version = 1
[families.text.datasets.vsr]
max_flip = 0.3
[[known_limitations]]
family = "text"
dataset = "vsr"
check = "max_flip"
reason = "a reason long enough"
"""


def test_an_overlay_adds_overrides_and_limitations(tmp_path):
    base = write(tmp_path, "version = 1\n[families.text]\nmax_flip = 0.1\nmax_drop = 0.05\n")
    overlay = write(tmp_path, OVERLAY, "overlay.toml")
    t = load_thresholds(base, families=FAMILIES, datasets=["vsr", "ai2d"], conditions=[], overlays=[overlay])
    assert t.limits_for("text", "vsr") == {"max_flip": 0.3, "max_drop": 0.05}
    assert t.limits_for("text", "ai2d") == {"max_flip": 0.1, "max_drop": 0.05}
    assert t.known_limitation("text", "vsr", "max_flip").reason == "a reason long enough"
    bare = load_thresholds(base, families=FAMILIES, datasets=["vsr"], conditions=[])
    assert bare.limits_for("text", "vsr") == {"max_flip": 0.1, "max_drop": 0.05} and not bare.known_limitations


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("version = 1\n[families.text]\nmax_flip = 0.2\n", "families.text.max_flip", ["no family-wide limit"]),
        ("version = 1\n[invariance.repeat]\nbitwise = true\n", "invariance", ["overlay", "known limitations"]),
        ("version = 1\n[families.text.datasets.mars]\nmax_flip = 0.2\n", "families.text.datasets.mars",
         ["unknown dataset"]),
        (OVERLAY + OVERLAY.split("\n", 3)[3], "known_limitations[1]", ["duplicate of known_limitations[0]"]),
    ],
)
def test_overlay_errors(tmp_path, text, key, words):
    base = write(tmp_path, "version = 1\n[families.text]\nmax_flip = 0.1\n")
    overlay = write(tmp_path, text, "overlay.toml")
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(base, families=FAMILIES, datasets=["vsr"], conditions=["repeat"], overlays=[overlay])
    assert info.value.path == str(overlay) and info.value.key == key
    for word in words:
        assert word in str(info.value)


def test_a_check_that_does_not_apply_to_the_family_is_an_error(tmp_path):
    path = write(tmp_path, "version = 1\n[families.text]\nmax_asr = 0.2\n")
    with pytest.raises(ThresholdsError, match="check 'max_asr' does not apply to family 'text'.*max_flip"):
        load_thresholds(path, families={"text": ("max_flip", "max_drop")}, datasets=[], conditions=[])


def test_a_file_with_only_the_version_is_valid(tmp_path):
    t = load(write(tmp_path, "version = 1\n"))
    assert (t.families, t.conditions, t.known_limitations) == ((), (), ())


# ------------------------------------------------------------------------------------------ error cases

LIMITATION = '[[known_limitations]]\nfamily = "{f}"\ndataset = "{d}"\ncheck = "{c}"\nreason = "{r}"\n'
BASE = "version = 1\n[families.text]\nmax_flip = 0.1\n"


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("version = 1\n[families.text\nmax_flip = 0.1\n", "(syntax)", ["not valid TOML", "line 2"]),
        ("version = 1\nversoin = 1\n", "versoin", ["unknown top-level key", "did you mean 'version'"]),
        ("[families.text]\nmax_flip = 0.1\n", "version", ["missing"]),
        ("version = 2\n", "version", ["unsupported version 2"]),
        ('version = "1"\n', "version", ["expected the int 1", "string"]),
        ("version = true\n", "version", ["expected the int 1", "bool"]),
        ("version = 1.0\n", "version", ["expected the int 1"]),
        ("version = 1\n[families.txet]\nmax_flip = 0.1\n", "families.txet", ["unknown family", "did you mean 'text'"]),
        ("version = 1\nfamilies = 3\n", "families", ["expected a table"]),
        ("version = 1\n[families]\ntext = 0.1\n", "families.text", ["expected a table"]),
        (BASE + "max_flp = 0.2\n", "families.text.max_flp", ["unknown check key", "did you mean 'max_flip'"]),
        (BASE + "[families.text.datasets.count_choise]\nmax_flip = 0.2\n",
         "families.text.datasets.count_choise", ["unknown dataset", "did you mean 'count_choice'"]),
        (BASE + "[families.text.datasets.count_choice]\nmax_flp = 0.2\n",
         "families.text.datasets.count_choice.max_flp", ["unknown check key", "did you mean 'max_flip'"]),
        (BASE + "[families.text.datasets.count_choice.datasets.exists_yesno]\nmax_flip = 0.2\n",
         "families.text.datasets.count_choice.datasets", ["unknown check key"]),
        (BASE + "datasets = 1\n", "families.text.datasets", ["expected a table"]),
        ("version = 1\n[families.text]\n", "families.text", ["no limit given"]),
        (BASE + "[families.text.datasets.count_choice]\n", "families.text.datasets.count_choice", ["no limit given"]),
        ('version = 1\n[families.text]\nmax_flip = "0.1"\n', "families.text.max_flip", ["expected a number", "string '0.1'"]),
        ("version = 1\n[families.text]\nmax_flip = true\n", "families.text.max_flip", ["expected a number", "bool true"]),
        ("version = 1\n[families.text]\nmax_flip = 1.5\n", "families.text.max_flip", ["[0, 1]"]),
        ("version = 1\n[families.text]\nmax_drop = -0.01\n", "families.text.max_drop", ["[0, 1]"]),
        ("version = 1\n[families.orig]\nmin_acc = 1.01\n", "families.orig.min_acc", ["[0, 1]"]),
        ("version = 1\n[families.orig]\nmax_ece = -0.1\n", "families.orig.max_ece", ["[0, 1]"]),
        ("version = 1\n[families.inject_text]\nmax_asr = 2\n", "families.inject_text.max_asr", ["[0, 1]"]),
        ("version = 1\n[families.text]\nmax_flip = nan\n", "families.text.max_flip", ["[0, 1]"]),
        ("version = 1\n[families.text_only]\nmin_gap = 1.2\n", "families.text_only.min_gap", ["[-1, 1]"]),
        ("version = 1\n[families.text_only]\nmin_gap = -1.5\n", "families.text_only.min_gap", ["[-1, 1]"]),
        ("version = 1\n[invariance.repaet]\nbitwise = true\n", "invariance.repaet",
         ["unknown invariance condition", "did you mean 'repeat'"]),
        ("version = 1\n[invariance.repeat]\nbitwize = true\n", "invariance.repeat.bitwize",
         ["unknown invariance key", "did you mean 'bitwise'"]),
        ("version = 1\n[invariance.repeat]\n", "invariance.repeat", ["no limit given"]),
        ("version = 1\n[invariance.repeat]\nbitwise = 1\n", "invariance.repeat.bitwise", ["true or false"]),
        # bitwise = false alone would judge nothing: a check that could never fail
        ("version = 1\n[invariance.repeat]\nbitwise = false\n", "invariance.repeat.bitwise",
         ["asks for nothing", "bitwise = true", "max_abs_dp"]),
        ("version = 1\n[invariance.batched]\nmax_flips = 0.0\n", "invariance.batched.max_flips", ["expected an int", "float"]),
        ("version = 1\n[invariance.batched]\nmax_flips = true\n", "invariance.batched.max_flips", ["expected an int"]),
        ("version = 1\n[invariance.batched]\nmax_flips = -1\n", "invariance.batched.max_flips", [">= 0"]),
        ("version = 1\n[invariance.batched]\nmax_abs_dp = -1e-5\n", "invariance.batched.max_abs_dp", ["> 0"]),
        ("version = 1\n[invariance.batched]\nmax_abs_dlogit = -1e-4\n", "invariance.batched.max_abs_dlogit", ["> 0"]),
        ("version = 1\n[invariance.batched]\nmax_abs_dp = 0\n", "invariance.batched.max_abs_dp", ["strict"]),
        ('version = 1\n[invariance.batched]\nmax_abs_dp = "1e-5"\n', "invariance.batched.max_abs_dp", ["expected a number"]),
        ("version = 1\ninvariance = []\n", "invariance", ["expected a table"]),
        ('version = 1\nknown_limitations = "none"\n', "known_limitations", ["array of tables"]),
        ("version = 1\nknown_limitations = [1]\n", "known_limitations[0]", ["expected a table"]),
    ],
)
def test_error_names_file_and_key(tmp_path, text, key, words):
    exc = error(tmp_path, text)
    assert exc.key == key
    assert f": {key}: " in str(exc)
    for word in words:
        assert word in str(exc)


def test_syntax_error_carries_the_parser_line(tmp_path):
    exc = error(tmp_path, "version = 1\n\n\nmax_flip = = 0.1\n")
    assert exc.key == "(syntax)" and "line 4" in str(exc)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(ThresholdsError, match=re.escape(f"{path}: (file): no such file")):
        load(path)


def test_typo_suggestion_lists_known_alternatives(tmp_path):
    exc = error(tmp_path, BASE + "max_flp = 0.2\n")
    assert "did you mean 'max_flip'" in str(exc)
    assert "known: " in str(exc) and "min_gap" in str(exc) and "datasets" in str(exc)


@pytest.mark.parametrize(
    "entry, key, words",
    [
        ('[[known_limitations]]\nfamily = "text"\ndataset = "count_choice"\ncheck = "max_flip"\n',
         "known_limitations[0].reason", ["missing"]),
        ('[[known_limitations]]\ndataset = "count_choice"\ncheck = "max_flip"\nreason = "r"\n',
         "known_limitations[0].family", ["missing"]),
        (LIMITATION.format(f="text", d="count_choice", c="max_flip", r="   "),
         "known_limitations[0].reason", ["non-empty string"]),
        (LIMITATION.format(f="text", d="count_choice", c="max_flip", r="r") + "why = 1\n",
         "known_limitations[0].why", ["unknown field"]),
        ('[[known_limitations]]\nfamily = 3\ndataset = "count_choice"\ncheck = "max_flip"\nreason = "r"\n',
         "known_limitations[0].family", ["non-empty string"]),
        (LIMITATION.format(f="txet", d="count_choice", c="max_flip", r="r"),
         "known_limitations[0].family", ["unknown family", "did you mean 'text'"]),
        (LIMITATION.format(f="image", d="count_choice", c="max_flip", r="r"),
         "known_limitations[0].family", ["family with limits in this file", "known: text"]),
        (LIMITATION.format(f="text", d="count_choise", c="max_flip", r="r"),
         "known_limitations[0].dataset", ["unknown dataset", "did you mean 'count_choice'"]),
        (LIMITATION.format(f="text", d="count_choice", c="max_flp", r="r"),
         "known_limitations[0].check", ["unknown check", "did you mean 'max_flip'"]),
        (LIMITATION.format(f="text", d="count_choice", c="min_gap", r="r"),
         "known_limitations[0].check", ["never evaluated", "its limits: max_flip"]),
        (LIMITATION.format(f="text", d="count_choice", c="max_flip", r="a")
         + LIMITATION.format(f="text", d="count_choice", c="max_flip", r="b"),
         "known_limitations[1]", ["duplicate of known_limitations[0]"]),
    ],
)
def test_known_limitation_errors(tmp_path, entry, key, words):
    exc = error(tmp_path, BASE + entry)
    assert exc.key == key
    for word in words:
        assert word in str(exc)


def test_limitation_may_target_a_check_set_only_by_the_dataset_override(tmp_path):
    text = (
        BASE + "[families.text.datasets.count_choice]\nmin_acc = 0.3\n"
        + LIMITATION.format(f="text", d="count_choice", c="min_acc", r="counting is hard")
    )
    t = load(write(tmp_path, text))
    assert t.known_limitation("text", "count_choice", "min_acc").reason == "counting is hard"
    exc = error(tmp_path, text.replace('dataset = "count_choice"', 'dataset = "exists_yesno"'))
    assert exc.key == "known_limitations[0].check" and "never evaluated" in str(exc)


def test_known_names_must_be_a_collection(tmp_path):
    path = write(tmp_path, "version = 1\n")
    with pytest.raises(TypeError, match="collection of names"):
        load_thresholds(path, families="text", datasets=DATASETS, conditions=CONDITIONS)


def test_bitwise_false_beside_another_limit_leaves_that_limit(tmp_path):
    t = load(write(tmp_path, "version = 1\n[invariance.repeat]\nbitwise = false\nmax_flips = 0\n"))
    assert t.invariance_limits("repeat") == {"bitwise": False, "max_flips": 0}


def test_the_schema_takes_each_check_range_from_its_declaration(tmp_path):
    """A limit inside its declared range loads and one just outside it is refused, for every declared check."""
    from laya_robustness.gate.catalogue import CATALOGUE

    for name, kind in CATALOGUE.items():
        text = f"version = 1\n[families.probe]\n{name} = {kind.high}\n"
        assert load(write(tmp_path, text), families={"probe": [name]}).limits_for("probe", "count_choice") == {name: kind.high}
        too_big = f"version = 1\n[families.probe]\n{name} = {kind.high + 0.5}\n"
        with pytest.raises(ThresholdsError, match=rf"\[{kind.low:g}, {kind.high:g}\]"):
            load(write(tmp_path, too_big), families={"probe": [name]})
