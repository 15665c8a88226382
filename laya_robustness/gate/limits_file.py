"""Load and validate the gate's limits file (thresholds.toml); every unknown or ill-typed key is an error.

The known family, dataset and invariance-condition names (and, per family, the checks that apply
to it) are passed in by the caller, so this module imports nothing from the rest of the gate (and
never pytest). A limits file may be layered with *overlays*: files that hold only per-dataset
overrides and known limitations for particular data (the embedded default's live in
``laya_fixtures/limitations.toml``), so the main file holds the release limits that apply to any data.

A file is read within bounds before it is parsed, so no file makes the parser slow or deep: at most
``MAX_FILE_BYTES``, UTF-8, keys of at most ``MAX_KEY_PARTS`` dotted parts, arrays and inline tables nested at most
``MAX_NESTING`` deep and numbers of at most ``MAX_DIGITS`` digits; each refusal names the file, the key and its line.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "thresholds.toml"
>>> _ = path.write_text('version = 1\\n[families.text]\\nmax_flip = 0.1\\n'
...                     '[families.text.datasets.vsr]\\nmax_flip = 0.2\\n')
>>> t = load_thresholds(path, families=["text"], datasets=["vsr", "ai2d"], conditions=[])
>>> t.limits_for("text", "vsr"), t.limits_for("text", "ai2d")
({'max_flip': 0.2}, {'max_flip': 0.1})
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import tomllib

from laya_robustness.gate.catalogue import (
    CATALOGUE,
    CHECKS,
    INVARIANCE_CATALOGUE,
    INVARIANCE_KEYS,
    POINT_BY_DEFAULT,
    REGRESSION_CHECKS,
    is_finite,
    unknown,
)

VERSION = 1
TOP_LEVEL_KEYS = ("version", "gate", "families", "invariance", "known_limitations")
#: How a limit is judged: on the evidence of its interval (fail only when the statistic lies past the limit
#: beyond sampling noise, at the gate's family-wise error rate) or on its point estimate.
JUDGES = ("interval", "point")
CORRECTIONS = ("bonferroni", "none")
GATE_KEYS = ("alpha", "judge", "correction", *REGRESSION_CHECKS)
#: What an overlay may hold: per-dataset overrides (under families.<f>.datasets), known limitations, and the
#: weights they were measured on (``[measured_on] weights_sha256 = {tensors = "<sha256>"}``, as a run's meta records
#: them).
OVERLAY_KEYS = ("version", "families", "known_limitations", "measured_on")
MEASURED_ON = "measured_on"
DATASETS_KEY = "datasets"
LIMITATION_FIELDS = ("family", "dataset", "check", "reason")
#: The largest limits file read (the release thresholds.toml is about 13 KB; the parser reads 256 KiB in half a
#: second).
MAX_FILE_BYTES = 256 << 10
#: The most dotted parts of a key or table header (families.<family>.datasets.<dataset>.<check>.limit has 6):
#: the parser's cost grows with the square of a key's parts.
MAX_KEY_PARTS = 16
#: The deepest nesting of arrays and inline tables (a limit table is 1 deep, [[known_limitations]] 2).
MAX_NESTING = 16
#: The most digits of a number (a count of flips has a few; the parser refuses ints past 4,300 digits).
MAX_DIGITS = 64
#: The largest count a limit may hold (max_flips).
MAX_COUNT = 1_000_000_000
#: A message shows at most this much of a key or a value.
SHOWN_CHARS = 80
#: Strings and comments of TOML (the scan looks only at keys, numbers and brackets): multi-line, basic and literal
#: strings, then a comment.
_STRING_OR_COMMENT = re.compile("|".join((r'"""[\s\S]*?"""', r"'''[\s\S]*?'''", r'"(?:[^"\\\n]|\\.)*"', r"'[^'\n]*'",
                                          r"#[^\n]*")))
_PART = r'(?:[A-Za-z0-9_-]+|"")'
_DOTTED = re.compile(rf"(?<![A-Za-z0-9_-]){_PART}(?:[ \t]*\.[ \t]*{_PART})+")  # from a key's start: linear
_DIGITS = re.compile(r"(?<![0-9_])(?:[0-9]_?){%d,}" % (MAX_DIGITS + 1))
_BRACKET = re.compile(r"[\[\]{}]")
_HEADER = re.compile(r"\s*\[\[?([^\]\n]*)\]")


class ThresholdsError(Exception):
    """A limits file that cannot be used; the message names the file, the dotted key and the problem."""

    def __init__(self, path: str | Path, key: str, problem: str):
        self.path, self.key, self.problem = str(path), key, problem
        super().__init__(f"{path}: {_cut(key)}: {problem}")


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


@dataclass(frozen=True)
class KnownLimitation:
    """A declared limitation: the check (family, dataset, check) is run as a strict xfail."""

    family: str
    dataset: str
    check: str
    reason: str


def _no_limit(keys: tuple[str, ...]) -> str:
    return f"no limit given; set one of {', '.join(keys)} or remove the table"


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return f"the bool {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {_cut(repr(value))}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value!r}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(path: Path, key: str, value: Any, lo: float, hi: float) -> float:
    """A finite int/float in [lo, hi], as a float."""
    if not _is_number(value):
        raise ThresholdsError(path, key, f"expected a number, got {_type_name(value)}")
    if not (is_finite(value) and lo <= value <= hi):
        raise ThresholdsError(path, key, f"expected a number in [{lo:g}, {hi:g}], got {value!r}")
    return float(value)


def _table(path: Path, key: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise ThresholdsError(path, key, f"expected a table, got {_type_name(value)}")
    return value


def _check_limit(path: Path, key: str, check: str, value: Any) -> float:
    """A limit of ``check`` in the range its declaration allows (``laya_robustness.gate.catalogue``)."""
    kind = CATALOGUE[check]
    return _number(path, key, value, kind.low, kind.high)


def _limit_and_judge(path: Path, key: str, check: str, value: Any) -> tuple[float, str | None]:
    """A limit given as a number, or as a table ``{limit = 0.1, judge = "point"}``."""
    if not isinstance(value, dict):
        return _check_limit(path, key, check, value), None
    for name in value:
        if name not in ("limit", "judge"):
            raise ThresholdsError(path, f"{key}.{name}", unknown("key of a limit table", name, ("limit", "judge")))
    if "limit" not in value:
        raise ThresholdsError(path, f"{key}.limit", "missing (a limit table is {limit = ..., judge = ...})")
    judge = value.get("judge")
    if judge is not None and judge not in JUDGES:
        raise ThresholdsError(path, f"{key}.judge", f"expected one of {', '.join(JUDGES)}, got {_type_name(judge)}")
    return _check_limit(path, f"{key}.limit", check, value["limit"]), judge


def _checks(path: Path, prefix: str, table: dict, applies: tuple[str, ...],
            allowed_extra: tuple[str, ...] = (), judges: dict | None = None) -> dict[str, float]:
    """The check limits of one family or dataset table (keys in ``allowed_extra`` are skipped); the judge
    a limit table names goes into ``judges`` under its check.

    ``applies`` are the checks that apply to the family: any other known check is an error too.
    """
    out = {}
    for key, value in table.items():
        if key in allowed_extra:
            continue
        if key not in CHECKS:
            raise ThresholdsError(path, f"{prefix}.{key}", unknown("check key", key, CHECKS + allowed_extra))
        if key not in applies:
            family = prefix.split(".")[1]
            raise ThresholdsError(path, f"{prefix}.{key}", f"check {key!r} does not apply to family {family!r} "
                                  f"(its checks: {', '.join(applies) or 'none'})")
        out[key], judge = _limit_and_judge(path, f"{prefix}.{key}", key, value)
        if judge is not None and judges is not None:
            judges[key] = judge
    return {c: out[c] for c in CHECKS if c in out}


def _overrides(path: Path, prefix: str, table: Any, datasets: frozenset[str], applies: tuple[str, ...],
               judges: dict | None = None) -> dict:
    """{dataset: override} of one [families.<family>.datasets] table (a limit table's judge goes into
    ``judges[(family, dataset)]``)."""
    overrides = {}
    family = prefix.split(".")[1]
    for dataset, sub in _table(path, f"{prefix}.{DATASETS_KEY}", table).items():
        key = f"{prefix}.{DATASETS_KEY}.{dataset}"
        if dataset not in datasets:
            raise ThresholdsError(path, key, unknown("dataset", dataset, datasets))
        named: dict = {}
        overrides[dataset] = _checks(path, key, _table(path, key, sub), applies, judges=named)
        if named and judges is not None:
            judges.setdefault((family, dataset), {}).update(named)
        if not overrides[dataset]:
            raise ThresholdsError(path, key, _no_limit(applies))
    return overrides


def _family(path: Path, family: str, table: Any, datasets: frozenset[str], applies: tuple[str, ...], judges: dict):
    """(family defaults, {dataset: override}) of one [families.<family>] table; judges named by limit
    tables go into ``judges`` under (family, None) and (family, dataset)."""
    prefix = f"families.{family}"
    table = _table(path, prefix, table)
    named: dict = {}
    defaults = _checks(path, prefix, table, applies, allowed_extra=(DATASETS_KEY,), judges=named)
    if named:
        judges[(family, None)] = named
    overrides = _overrides(path, prefix, table.get(DATASETS_KEY, {}), datasets, applies, judges)
    if not defaults and not overrides:
        raise ThresholdsError(path, prefix, _no_limit(applies))
    return defaults, overrides


def _invariance_value(path: Path, key: str, name: str, value: Any) -> bool | int | float:
    kind = INVARIANCE_CATALOGUE[name].value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ThresholdsError(path, key, f"expected true or false, got {_type_name(value)}")
        return value
    if kind == "count":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ThresholdsError(path, key, f"expected an int (a count of flips), got {_type_name(value)}")
        if value < 0:
            raise ThresholdsError(path, key, f"expected an int >= 0, got {value!r}")
        if value > MAX_COUNT:
            raise ThresholdsError(path, key, f"expected an int <= {MAX_COUNT:,} (a count of flips), got {value!r}")
        return value
    if not _is_number(value):
        raise ThresholdsError(path, key, f"expected a number, got {_type_name(value)}")
    if not (is_finite(value) and value > 0):
        # The check is |d| < limit, so 0 could never pass: exact equality is bitwise = true.
        problem = f"expected a finite number > 0 (the check is strict: |d| < limit), got {value!r}"
        raise ThresholdsError(path, key, problem)
    return float(value)


def _invariance(path: Path, table: Any, conditions: frozenset[str]) -> dict[str, dict]:
    out = {}
    for condition, sub in _table(path, "invariance", table).items():
        prefix = f"invariance.{condition}"
        if condition not in conditions:
            raise ThresholdsError(path, prefix, unknown("invariance condition", condition, conditions))
        limits = {}
        for name, value in _table(path, prefix, sub).items():
            if name not in INVARIANCE_KEYS:
                raise ThresholdsError(path, f"{prefix}.{name}", unknown("invariance key", name, INVARIANCE_KEYS))
            limits[name] = _invariance_value(path, f"{prefix}.{name}", name, value)
        if not limits:
            raise ThresholdsError(path, prefix, _no_limit(INVARIANCE_KEYS))
        if not any(v is not False for v in limits.values()):
            raise ThresholdsError(path, f"{prefix}.bitwise", "bitwise = false alone asks for nothing, so the "
                                  "condition would judge nothing; set bitwise = true, or a limit of "
                                  f"{', '.join(k for k in INVARIANCE_KEYS if k != 'bitwise')}, or remove the table")
        out[condition] = {k: limits[k] for k in INVARIANCE_KEYS if k in limits}
    return out


def _version(path: Path, data: dict) -> None:
    if "version" not in data:
        raise ThresholdsError(path, "version", f"missing; the file must start with version = {VERSION}")
    value = data["version"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ThresholdsError(path, "version", f"expected the int {VERSION}, got {_type_name(value)}")
    if value != VERSION:
        raise ThresholdsError(path, "version", f"unsupported version {value} (supported: {VERSION})")


def _key_at(text: str, line: int) -> str:
    """The dotted key line ``line`` (1-based) of a TOML text sets, for a message (best effort: its table's header
    and what stands before its ``=``)."""
    lines = text.split("\n")[:line]
    header = ""
    for number, raw in enumerate(lines, start=1):
        match = _HEADER.match(raw)
        if match:
            header = match.group(1).strip()
            if number == line:
                return header
    name = lines[-1].split("=", 1)[0].strip() if lines and "=" in lines[-1] else ""
    return ".".join(part for part in (header, name) if part) or "(top level)"


def _scan(path: Path, text: str) -> None:
    """Refuse, before parsing, a key of more than MAX_KEY_PARTS parts, nesting deeper than MAX_NESTING and a number
    of more than MAX_DIGITS digits (strings and comments are not looked at), naming the key and its line."""
    bare = _STRING_OR_COMMENT.sub(lambda m: "\n" * m.group().count("\n") + ("" if m.group()[0] == "#" else '""'),
                                  text)

    def refuse(at: int, problem: str):
        line = bare.count("\n", 0, at) + 1
        raise ThresholdsError(path, _key_at(text, line), f"line {line}: {problem}")

    for match in _DOTTED.finditer(bare):
        parts = match.group().count(".") + 1
        if parts > MAX_KEY_PARTS:
            refuse(match.start(), f"a key of {parts:,} dotted parts, over the limit of {MAX_KEY_PARTS}")
    depth = 0
    for match in _BRACKET.finditer(bare):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_NESTING:
            refuse(match.start(), f"arrays or inline tables nested over {MAX_NESTING} deep")
    match = _DIGITS.search(bare)
    if match:
        digits = sum(c.isdigit() for c in match.group())
        refuse(match.start(), f"a number of {digits:,} digits, over the limit of {MAX_DIGITS}")


def _read(path: Path) -> dict:
    """The parsed TOML of a limits file within the bounds of the module doc."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ThresholdsError(path, "(file)", "no such file") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ThresholdsError(path, "(file)", f"over {MAX_FILE_BYTES:,} bytes, the limit of a limits file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ThresholdsError(path, _key_at(raw.decode("utf-8", "replace"), line), f"line {line}: not UTF-8: "
                              f"byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the file") from None
    _scan(path, text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdsError(path, "(syntax)", f"not valid TOML: {exc}") from exc


@dataclass(frozen=True)
class Gate:
    """How the limits are judged: ``alpha`` is the family-wise false-alarm rate of the whole gate,
    split over the m interval-judged checks of a run by ``correction`` (Bonferroni: alpha / m each);
    ``judge`` the default of every limit; ``max_regression`` the largest accuracy loss of a family
    against a ``--baseline`` and ``max_flip_regression`` the largest flip-rate rise of a meaning-preserving
    family against it (None: no such check; 0: no loss that is real at the gate's error rate)."""

    alpha: float = 0.05
    judge: str = "interval"
    correction: str = "bonferroni"
    max_regression: float | None = 0.0
    max_flip_regression: float | None = 0.0

    def alpha_each(self, m: int) -> float:
        """The one-sided error rate of each of ``m`` interval-judged checks."""
        return self.alpha / max(1, m) if self.correction == "bonferroni" else self.alpha


def _gate(path: Path, value: Any) -> Gate:
    table = _table(path, "gate", value)
    for key in table:
        if key not in GATE_KEYS:
            raise ThresholdsError(path, f"gate.{key}", unknown("gate key", key, GATE_KEYS))
    out = Gate()
    if "alpha" in table:
        alpha = _number(path, "gate.alpha", table["alpha"], 0.0, 1.0)
        if not 0 < alpha < 1:
            raise ThresholdsError(path, "gate.alpha", f"expected a number in (0, 1), got {alpha!r}")
        out = replace(out, alpha=alpha)
    for key, choices in (("judge", JUDGES), ("correction", CORRECTIONS)):
        if key in table:
            if table[key] not in choices:
                raise ThresholdsError(path, f"gate.{key}", f"expected one of {', '.join(choices)}, "
                                      f"got {_type_name(table[key])}")
            out = replace(out, **{key: table[key]})
    for key in REGRESSION_CHECKS:
        if key in table:
            out = replace(out, **{key: _number(path, f"gate.{key}", table[key], 0.0, 1.0)})
    return out


@dataclass(frozen=True)
class Thresholds:
    """The validated limits of one file. Build it with :func:`load_thresholds`."""

    path: Path
    _defaults: Mapping[str, Mapping[str, float]]
    _overrides: Mapping[str, Mapping[str, Mapping[str, float]]]
    _invariance: Mapping[str, Mapping[str, Any]]
    _limitations: Mapping[tuple[str, str, str], KnownLimitation]
    _known_families: frozenset[str] = field(repr=False)
    _known_datasets: frozenset[str] = field(repr=False)
    _known_conditions: frozenset[str] = field(repr=False)
    overlays: tuple[Path, ...] = ()
    gate: Gate = field(default_factory=Gate)
    _judges: Mapping[tuple[str, str | None], Mapping[str, str]] = field(default_factory=dict, repr=False)

    @property
    def families(self) -> tuple[str, ...]:
        """The families the file sets a limit for (a default or a dataset override), sorted."""
        return tuple(sorted(self._defaults))

    @property
    def conditions(self) -> tuple[str, ...]:
        """The invariance conditions the file sets a limit for, sorted."""
        return tuple(sorted(self._invariance))

    @property
    def known_limitations(self) -> tuple[KnownLimitation, ...]:
        """Every declared limitation, in file order."""
        return tuple(self._limitations.values())

    def _require(self, kind: str, name: str, known: frozenset[str]) -> None:
        if name not in known:
            raise KeyError(unknown(kind, name, known))

    def limits_for(self, family: str, dataset: str) -> dict[str, float]:
        """{check: limit} for one cell: the family's defaults updated by the dataset's override.

        {} for a known family without limits; an unknown family or dataset raises KeyError.
        """
        self._require("family", family, self._known_families)
        self._require("dataset", dataset, self._known_datasets)
        merged = {**self._defaults.get(family, {}), **self._overrides.get(family, {}).get(dataset, {})}
        return {c: merged[c] for c in CHECKS if c in merged}

    def invariance_limits(self, condition: str) -> dict:
        """{key: limit} of one invariance condition ({} without limits; unknown names raise KeyError)."""
        self._require("invariance condition", condition, self._known_conditions)
        return dict(self._invariance.get(condition, {}))

    def judge_for(self, family: str, dataset: str, check: str) -> str:
        """How a limit is judged: its dataset's limit table, else its family's, else ``point`` for the checks of
        POINT_BY_DEFAULT, else the gate's default."""
        for key in ((family, dataset), (family, None)):
            judge = self._judges.get(key, {}).get(check)
            if judge is not None:
                return judge
        return "point" if check in POINT_BY_DEFAULT else self.gate.judge

    def known_limitation(self, family: str, dataset: str, check: str) -> KnownLimitation | None:
        """The declared limitation of this check on this cell, or None."""
        return self._limitations.get((family, dataset, check))


def _limitation(path: Path, i: int, entry: Any, thresholds: Thresholds) -> KnownLimitation:
    prefix = f"known_limitations[{i}]"
    entry = _table(path, prefix, entry)
    for name in entry:
        if name not in LIMITATION_FIELDS:
            raise ThresholdsError(path, f"{prefix}.{name}", unknown("field", name, LIMITATION_FIELDS))
    for name in LIMITATION_FIELDS:
        if name not in entry:
            raise ThresholdsError(path, f"{prefix}.{name}", f"missing (each entry needs {', '.join(LIMITATION_FIELDS)})")
        if not isinstance(entry[name], str) or not entry[name].strip():
            problem = f"expected a non-empty string, got {_type_name(entry[name])}"
            raise ThresholdsError(path, f"{prefix}.{name}", problem)
    family, dataset, check = entry["family"], entry["dataset"], entry["check"]
    if family not in thresholds._known_families:
        raise ThresholdsError(path, f"{prefix}.family", unknown("family", family, thresholds._known_families))
    if family not in thresholds.families:
        problem = unknown("family with limits in this file", family, thresholds.families)
        raise ThresholdsError(path, f"{prefix}.family", problem)
    if dataset not in thresholds._known_datasets:
        raise ThresholdsError(path, f"{prefix}.dataset", unknown("dataset", dataset, thresholds._known_datasets))
    if check not in CHECKS:
        raise ThresholdsError(path, f"{prefix}.check", unknown("check", check, CHECKS))
    limits = thresholds.limits_for(family, dataset)
    if check not in limits:
        raise ThresholdsError(
            path, f"{prefix}.check",
            f"{check!r} is not a limit of {family}/{dataset} in these limits, so it is never evaluated"
            f" (its limits: {', '.join(limits) or 'none'})",
        )
    return KnownLimitation(family, dataset, check, entry["reason"].strip())


def _limitations(entries: list[tuple[Path, int, Any]], thresholds: Thresholds) -> dict:
    """Every (file, index, entry) as a KnownLimitation; a duplicate (in any of the files) is an error."""
    out: dict[tuple[str, str, str], KnownLimitation] = {}
    first: dict[tuple[str, str, str], tuple[Path, int]] = {}
    for path, i, entry in entries:
        lim = _limitation(path, i, entry, thresholds)
        key = (lim.family, lim.dataset, lim.check)
        if key in out:
            where, j = first[key]
            other = f"known_limitations[{j}]" if where == path else f"{where.name}: known_limitations[{j}]"
            raise ThresholdsError(path, f"known_limitations[{i}]",
                                  f"duplicate of {other} ({lim.family}/{lim.dataset} {lim.check})")
        out[key], first[key] = lim, (path, i)
    return out


def _limitation_entries(path: Path, value: Any) -> list[tuple[Path, int, Any]]:
    if not isinstance(value, list):
        problem = f"expected an array of tables ([[known_limitations]]), got {_type_name(value)}"
        raise ThresholdsError(path, "known_limitations", problem)
    return [(path, i, entry) for i, entry in enumerate(value)]


def _names(kind: str, names: Iterable[str]) -> frozenset[str]:
    if isinstance(names, str):
        raise TypeError(f"{kind} must be a collection of names, not the string {names!r}")
    out = frozenset(names)
    if not all(isinstance(n, str) and n for n in out):
        raise TypeError(f"{kind} must hold non-empty strings, got {sorted(map(repr, out))}")
    return out


def _applicable(families: Iterable[str] | Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """family -> the checks that apply to it (every check when only names are given)."""
    if isinstance(families, Mapping):
        out = {}
        for name, checks in families.items():
            unknown = [c for c in checks if c not in CHECKS]
            if unknown:
                raise ValueError(f"family {name!r}: unknown checks {unknown} (known: {', '.join(CHECKS)})")
            out[name] = tuple(c for c in CHECKS if c in set(checks))
        _names("families", out)
        return out
    return {name: CHECKS for name in _names("families", families)}


def measured_on(path: str | Path) -> dict[str, str] | None:
    """The weights an overlay's known limitations were measured on (``weights_sha256`` as a run's meta records them:
    ``{"tensors": <sha256>}``), or None when the overlay does not say; ThresholdsError naming the key when it is
    malformed."""
    path = Path(path)
    table = _read(path).get(MEASURED_ON)
    if table is None:
        return None
    table = _table(path, MEASURED_ON, table)
    for key in table:
        if key != "weights_sha256":
            raise ThresholdsError(path, f"{MEASURED_ON}.{key}", unknown("key", key, ("weights_sha256",)))
    hashes = _table(path, f"{MEASURED_ON}.weights_sha256", table.get("weights_sha256", {}))
    for name, digest in hashes.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ThresholdsError(path, f"{MEASURED_ON}.weights_sha256.{name}",
                                  f"expected a sha256 (64 lowercase hex digits), got {digest!r}")
    if not hashes:
        raise ThresholdsError(path, f"{MEASURED_ON}.weights_sha256", "expected the weights' sha256 (tensors = \"<sha256>\", as summary.json's meta.model.weights_sha256)")
    return dict(hashes)


def _overlay(path: Path, known_families: Mapping[str, tuple[str, ...]], known_datasets: frozenset[str],
             overrides: dict, defaults: dict, judges: dict) -> list[tuple[Path, int, Any]]:
    """Merge one overlay's per-dataset overrides into ``overrides``; return its known limitations."""
    data = _read(path)
    measured_on(path)  # validated here too, so a bad table is the limits' error wherever the overlay is read
    for key in data:
        if key not in OVERLAY_KEYS:
            problem = unknown("top-level key of an overlay", key, OVERLAY_KEYS)
            raise ThresholdsError(path, key, problem + "; an overlay holds per-dataset overrides and known limitations")
    _version(path, data)
    for family, table in _table(path, "families", data.get("families", {})).items():
        prefix = f"families.{family}"
        if family not in known_families:
            raise ThresholdsError(path, prefix, unknown("family", family, known_families))
        for key in _table(path, prefix, table):
            if key != DATASETS_KEY:
                raise ThresholdsError(path, f"{prefix}.{key}", "an overlay sets no family-wide limit, only "
                                      f"[{prefix}.{DATASETS_KEY}.<dataset>] overrides")
        added = _overrides(path, prefix, table.get(DATASETS_KEY, {}), known_datasets, known_families[family], judges)
        defaults.setdefault(family, {})
        for dataset, limits in added.items():
            overrides.setdefault(family, {}).setdefault(dataset, {}).update(limits)
    return _limitation_entries(path, data.get("known_limitations", []))


def load_thresholds(
    path: str | Path,
    *,
    families: Iterable[str] | Mapping[str, Iterable[str]],
    datasets: Iterable[str],
    conditions: Iterable[str],
    overlays: Iterable[str | Path] = (),
) -> Thresholds:
    """Read and validate a limits file (and its overlays) against the known names.

    ``families`` is the known family names, or a mapping family -> the checks that apply to it (a
    limit of another check is then an error). Each overlay (applied in order) may only add
    per-dataset overrides and known limitations. Raises ThresholdsError (naming the file and the
    dotted key) on a syntax error, an unknown or missing key, a value of the wrong type or range, a
    check that does not apply, or a known limitation that could never apply.
    """
    path = Path(path)
    applies = _applicable(families)
    known_families = frozenset(applies)
    known_datasets = _names("datasets", datasets)
    known_conditions = _names("conditions", conditions)
    data = _read(path)
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ThresholdsError(path, key, unknown("top-level key", key, TOP_LEVEL_KEYS))
    _version(path, data)
    defaults, overrides, judges = {}, {}, {}
    for family, table in _table(path, "families", data.get("families", {})).items():
        if family not in known_families:
            raise ThresholdsError(path, f"families.{family}", unknown("family", family, known_families))
        defaults[family], overrides[family] = _family(path, family, table, known_datasets, applies[family], judges)
    entries = _limitation_entries(path, data.get("known_limitations", []))
    overlay_paths = tuple(Path(p) for p in overlays)
    for overlay in overlay_paths:
        entries += _overlay(overlay, applies, known_datasets, overrides, defaults, judges)
    thresholds = Thresholds(
        path, defaults, overrides, _invariance(path, data.get("invariance", {}), known_conditions), {},
        known_families, known_datasets, known_conditions, overlay_paths,
        _gate(path, data.get("gate", {})), judges,
    )
    return replace(thresholds, _limitations=_limitations(entries, thresholds))
