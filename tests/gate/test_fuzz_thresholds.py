"""Fuzzed limits files built from the thresholds.toml schema: each loads or raises a ThresholdsError naming the file.

Bounded and deterministic (``derandomize=True``, no example database), a second or two.
"""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laya_robustness.gate.catalogue import CHECKS, INVARIANCE_KEYS
from laya_robustness.gate.limits_file import load_thresholds, Thresholds, ThresholdsError

FAMILIES = ("orig", "option_order", "image_shuffle")
DATASETS = ("colour_choice", "exists_yesno")
CONDITIONS = ("repeat_batch", "bf16")
#: TOML's integers are 64-bit; a longer one is read by tomllib all the same, and breaks the file's
#: validation (see test_an_integer_limit_beyond_the_float_range below), so the fuzzer stays in range.
INT64 = 2**63 - 1


def mostly(good, bad):
    """Usually (8 in 9) a value of the schema's shape, sometimes anything."""
    return st.integers(0, 8).flatmap(lambda i: bad if i == 8 else good)


#: Text without lone surrogates (which no TOML file can hold); a few syntax errors come from the tail.
text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=5)


def name(known):
    return mostly(st.sampled_from(known), st.one_of(text, st.sampled_from(["optoin_order", ""])))


scalar = st.one_of(st.booleans(), st.integers(-INT64 - 1, INT64), st.integers(), st.floats(), text)
anything = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                        st.dictionaries(text, inner, max_size=2)),
                        max_leaves=4)
limit = mostly(st.one_of(st.floats(-1.5, 1.5), st.integers(-2, 2), st.sampled_from([True, 0.1, 1e-5])),
               st.one_of(anything, st.integers(-INT64 - 1, INT64), st.integers(min_value=2**1100)))
checks = st.dictionaries(mostly(st.sampled_from(CHECKS), text), limit, max_size=3)
family_table = st.builds(lambda c, d: {**c, **({"datasets": d} if d is not None else {})}, checks,
                         st.one_of(st.none(), st.dictionaries(name(DATASETS), mostly(checks, anything), max_size=2)))
invariance = st.dictionaries(name(CONDITIONS),
                             mostly(st.dictionaries(mostly(st.sampled_from(INVARIANCE_KEYS), text),
                                                    limit, max_size=3), anything), max_size=2)
limitation = st.fixed_dictionaries(
    {"family": name(FAMILIES), "dataset": name(DATASETS), "check": name(CHECKS), "reason": mostly(text, anything)},
    optional={"extra": mostly(st.nothing(), anything)})
documents = st.fixed_dictionaries({"version": mostly(st.just(1), anything)}, optional={
    "families": mostly(st.dictionaries(name(FAMILIES), mostly(family_table, anything), max_size=3), anything),
    "invariance": mostly(invariance, anything),
    "known_limitations": mostly(st.lists(mostly(limitation, anything), max_size=3), anything),
    "extra": mostly(st.nothing(), anything),
})


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes, with characters beyond U+FFFF and DEL written as TOML wants."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value) -> str:
    """A value as TOML (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in doc.items())


@pytest.fixture(scope="module")
def limits_path(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "thresholds.toml"


@settings(derandomize=True, database=None, deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(documents, mostly(st.just(""), text))
def test_fuzzed_limits_files_load_or_raise_a_thresholds_error(limits_path, doc, tail):
    limits_path.write_text(toml_document(doc) + tail, encoding="utf-8", errors="surrogatepass")
    try:
        result = load_thresholds(limits_path, families=FAMILIES, datasets=DATASETS, conditions=CONDITIONS)
    except ThresholdsError as exc:
        assert str(limits_path) in str(exc), exc
    else:
        assert isinstance(result, Thresholds)


def test_the_emitted_toml_is_what_tomllib_reads():
    import tomllib

    doc = {"version": 1, "families": {"orig": {"min_acc": 0.5, "datasets": {"exists_yesno": {"min_acc": 0.75}}}},
           "known_limitations": [{"family": "orig", "dataset": "exists_yesno", "check": "min_acc",
                                  "reason": "é\n\x7f\U0001f600"}],
           "invariance": {"repeat_batch": {"bitwise": True, "max_flips": 0}}}
    assert tomllib.loads(toml_document(doc)) == doc


@pytest.mark.parametrize("table, key", [("[families.orig]\nmin_acc", "families.orig.min_acc"),
                                        ("[invariance.repeat_batch]\nmax_abs_dp", "invariance.repeat_batch.max_abs_dp")])
def test_an_integer_limit_beyond_the_float_range(limits_path, table, key):
    """TOML (as tomllib reads it) allows integers past the float range; they are refused like any bad number."""
    limits_path.write_text(f"version = 1\n{table} = 1" + "0" * 400 + "\n")
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(limits_path, families=FAMILIES, datasets=DATASETS, conditions=CONDITIONS)
    assert info.value.key == key
