"""Prediction records: one scored row, validated once where it enters (scoring or a predictions file).

A record is a ``dict`` (so it serialises as it is and old code reading ``r["label"]`` keeps
working) whose fields were checked when it was made: ``Record.parse`` is the only way in.
Typed read access goes through properties (``r.label``, ``r.meta``...).

>>> r = Record.parse({"row_id": "d/1", "group_id": "d/1", "cluster": "c", "dataset": "d", "family": "orig",
...                   "variant": "orig", "primitive": "noul", "label": 1, "logits": [0.0, 1.0],
...                   "probs": [0.27, 0.73], "argmax": 1}, "example")
>>> r.label, r.is_orig, r.meta
(1, True, {})
>>> Record.parse({**r, "group_id": 7}, "example")
Traceback (most recent call last):
  ...
laya_robustness.records.PredictionError: example: field 'group_id': expected a non-empty string, got 7
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

#: The family name of the unperturbed source rows (every other family is paired against them).
ORIG = "orig"
#: Every record needs these fields (more are kept as they are).
STR_FIELDS = ("row_id", "group_id", "cluster", "dataset", "family", "variant", "primitive")
REQUIRED_FIELDS = STR_FIELDS + ("label", "logits", "probs", "argmax")
#: An open-answer row is answered in free text: its record holds the generated text, its normalised
#: form and whether that is one of the (normalised) accepted answers, with no logits (label and argmax -1).
OPEN = "open"
OPEN_FIELDS = ("raw_answer", "answer", "answers", "correct")
#: A generation-only scorer (a served model without probabilities) answers a choice / yes-no row in text: its
#: record holds the generated text (``raw_answer``), the extraction rule that mapped it to an option
#: (``extraction``; ``unparsed`` when it names no option or several), the number of options and the chosen
#: option as ``argmax`` (label order; ``UNPARSED_ANSWER`` when unparsed), with no logits and no probabilities.
GENERATED_FIELDS = ("raw_answer", "extraction", "n_options")
UNPARSED = "unparsed"
UNPARSED_ANSWER = -1
#: What every probability-based number of a generation-only scorer's records says instead of a value.
NO_PROBABILITIES = "not available for a generation-only scorer"


class PredictionError(ValueError):
    """A prediction record that cannot be used; the message names where it is and which field."""

    def __init__(self, where: str, field_name: str, problem: str):
        self.where, self.field_name = where, field_name
        super().__init__(f"{where}: field '{field_name}': {problem}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _numbers(record: Mapping[str, Any], key: str, where: str) -> list:
    values = record[key]
    if not isinstance(values, (list, tuple)) or not values:
        raise PredictionError(where, key, f"expected a non-empty list of numbers, got {values!r}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise PredictionError(where, key, f"expected finite numbers, got {values!r}")
    return list(values)


def _validate_open(record: Mapping[str, Any], where: str) -> None:
    for key in OPEN_FIELDS:
        if key not in record:
            raise PredictionError(where, key, "missing (an open-answer record needs it)")
    for key in ("raw_answer", "answer"):
        if not isinstance(record[key], str):
            raise PredictionError(where, key, f"expected a string, got {record[key]!r}")
    answers = record["answers"]
    if not isinstance(answers, (list, tuple)) or not answers or not all(isinstance(a, str) for a in answers):
        raise PredictionError(where, "answers", f"expected a non-empty list of strings, got {answers!r}")
    if not isinstance(record["correct"], bool):
        raise PredictionError(where, "correct", f"expected true or false, got {record['correct']!r}")
    for key in ("logits", "probs"):
        if record[key] not in ([], ()):
            raise PredictionError(where, key, f"an open-answer record has none, got {record[key]!r}")
    for key in ("label", "argmax"):
        if record[key] != -1 or not _is_int(record[key]):
            raise PredictionError(where, key, f"an open-answer record has -1, got {record[key]!r}")


def _validate_generated(record: Mapping[str, Any], where: str) -> int:
    """A generation-only record's fields (see GENERATED_FIELDS); returns its number of options."""
    for key in GENERATED_FIELDS:
        if key not in record:
            raise PredictionError(where, key, "missing (a record without logits needs it)")
    k = record["n_options"]
    if not _is_int(k) or k < 1:
        raise PredictionError(where, "n_options", f"expected an int >= 1, got {k!r}")
    for key in ("raw_answer", "extraction"):
        if not isinstance(record[key], str) or (key == "extraction" and not record[key]):
            raise PredictionError(where, key, f"expected a string, got {record[key]!r}")
    if record["probs"] not in ([], ()):
        raise PredictionError(where, "probs", f"a record without logits has none, got {record['probs']!r}")
    argmax, unparsed = record["argmax"], record["extraction"] == UNPARSED
    if not _is_int(argmax) or not (argmax == UNPARSED_ANSWER if unparsed else 0 <= argmax < k):
        expected = f"{UNPARSED_ANSWER} (unparsed)" if unparsed else f"an int in [0, {k})"
        raise PredictionError(where, "argmax", f"expected {expected}, got {argmax!r}")
    return k


def _validate(record: Any, where: str) -> None:
    if not isinstance(record, Mapping):
        raise PredictionError(where, "(record)", f"expected a JSON object, got {type(record).__name__}")
    for key in REQUIRED_FIELDS:
        if key not in record:
            raise PredictionError(where, key, "missing")
    for key in STR_FIELDS:
        if not isinstance(record[key], str) or not record[key]:
            raise PredictionError(where, key, f"expected a non-empty string, got {record[key]!r}")
    if "category" in record and record["category"] is not None and not isinstance(record["category"], str):
        raise PredictionError(where, "category", f"expected a string or null, got {record['category']!r}")
    if record["primitive"] == OPEN:
        _validate_open(record, where)
        return
    if record["logits"] in ([], ()) and "n_options" in record:
        k = _validate_generated(record, where)
    else:
        k = len(_numbers(record, "logits", where))
        if len(_numbers(record, "probs", where)) != k:
            raise PredictionError(where, "probs", f"has {len(record['probs'])} entries for {k} logits")
        if not _is_int(record["argmax"]) or not 0 <= record["argmax"] < k:
            raise PredictionError(where, "argmax", f"expected an int in [0, {k}), got {record['argmax']!r}")
    if not _is_int(record["label"]) or not -1 <= record["label"] < k:
        raise PredictionError(where, "label", f"expected an int in [-1, {k}), got {record['label']!r}")
    if "meta" in record and not isinstance(record["meta"], Mapping):
        raise PredictionError(where, "meta", f"expected an object, got {type(record['meta']).__name__}")
    if "n_images" in record and (not _is_int(record["n_images"]) or record["n_images"] < 0):
        raise PredictionError(where, "n_images", f"expected an int >= 0, got {record['n_images']!r}")


class Record(dict):
    """One validated prediction record (see the module doc). Build it with :meth:`parse`."""

    __slots__ = ()

    @classmethod
    def parse(cls, record: Any, where: str) -> "Record":
        """Validate ``record`` (fields, types, label in [-1, k), argmax in [0, k)) and wrap it.

        A Record is returned as it is; anything else raises PredictionError naming ``where`` and the field.
        """
        if isinstance(record, Record):
            return record
        _validate(record, where)
        out = cls(record)
        if isinstance(out["logits"], tuple) or isinstance(out["probs"], tuple):
            out.update(logits=list(out["logits"]), probs=list(out["probs"]))
        return out

    row_id = property(lambda self: self["row_id"])
    group_id = property(lambda self: self["group_id"])
    cluster = property(lambda self: self["cluster"])
    dataset = property(lambda self: self["dataset"])
    family = property(lambda self: self["family"])
    variant = property(lambda self: self["variant"])
    primitive = property(lambda self: self["primitive"])
    label = property(lambda self: self["label"])
    logits = property(lambda self: self["logits"])
    probs = property(lambda self: self["probs"])
    argmax = property(lambda self: self["argmax"])

    @property
    def meta(self) -> Mapping[str, Any]:
        """The row's meta ({} when the record has none)."""
        return self.get("meta", {})

    @property
    def group(self) -> tuple[str, str]:
        """The group the record belongs to: ``(dataset, group_id)``."""
        return (self["dataset"], self["group_id"])

    @property
    def is_orig(self) -> bool:
        return self["family"] == ORIG

    @property
    def is_open(self) -> bool:
        return self["primitive"] == OPEN

    def meta_value(self, key: str) -> Any:
        """``meta[key]``; a missing key raises PredictionError naming the row and the family that needs it."""
        try:
            return self.meta[key]
        except KeyError:
            raise PredictionError(self["row_id"], f"meta.{key}", f"missing (family {self['family']} writes it)") from None


def option_count(record: Mapping[str, Any]) -> int:
    """How many options a record's row had: its logits, or a generation-only record's ``n_options``."""
    return len(record["logits"]) or int(record.get("n_options", 0))


def generation_only(record: Mapping[str, Any]) -> bool:
    """Whether a choice / yes-no record was answered in text with no probabilities (see GENERATED_FIELDS)."""
    return record["primitive"] != OPEN and not record["probs"] and "n_options" in record


def parse_records(records: Iterable[Any], where: str = "record") -> list[Record]:
    """Every record parsed (``where`` plus the index names a bad one)."""
    return [Record.parse(r, f"{where} {i}") for i, r in enumerate(records)]
