"""A run's rows: the sampled source rows of every dataset under ``--data`` with the user's rephrasings and
translations attached, and the caption rows with the user's paraphrases; read once at the start of a run,
and read again the same way from a finished run's meta (``reread_rows``: the report and the layerwise
analysis rebuild what the run scored). Given an image store (``run.pipeline.image_store.ImageStore``), the question rows'
images wait in it, each decoded once at load for its content key; without one they are decoded and held."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from laya_robustness.families.rephrase import attach_variants
from laya_robustness.families.row_set import RowSet, SampledRows
from laya_robustness.loaders import LoadSettings, RowErrors, SourceRow, scan_rows
from laya_robustness.loaders.captions import load_captions
from laya_robustness.loaders.variant_files import load_paraphrases, read_user_file
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import REPHRASINGS, TRANSLATIONS, Row, RowError
from laya_robustness.run.errors import UsageError
from laya_robustness.run.pipeline.image_store import ImageStore, waiting_rows

RowLike = TypeVar("RowLike")  # a Row, or a loader's SourceRow (row_id, dataset, load())
#: The reading rules a run's meta records under ``inputs`` (``LoadSettings``' fields).
READING_RULES = ("data_map", "max_image_pixels", "max_image_side", "allow_outside_data")


def sample_rows(rows: Sequence[RowLike], n: int, seed: int) -> list[RowLike]:
    """``n`` rows drawn without replacement with ``keyed_rng(seed, "sample", dataset)``, in row-id order.

    ``n <= 0`` or ``n >= len(rows)`` keeps every row. Only ``row_id`` and ``dataset`` are read, so
    the loaders' not-yet-decoded rows are sampled the same way as rows.
    """
    ordered = sorted(rows, key=lambda r: r.row_id)
    if n <= 0 or n >= len(ordered):
        return ordered
    pick = keyed_rng(seed, "sample", ordered[0].dataset).choice(len(ordered), size=n, replace=False)
    return [ordered[i] for i in sorted(pick)]


def load_source_rows(data: str | Path, rows_per_set: int, seed: int, settings: LoadSettings | None = None,
                     store: ImageStore | None = None) -> dict[str, SampledRows]:
    """The sampled source rows of every dataset under ``data``, by dataset name (sorted), each dataset's with the
    row set they were sampled from (``families.row_set.SampledRows``).

    Every row is validated and every image checked from its header first; then every sampled row's
    images are decoded, held (no ``store``) or only keyed and left waiting in ``store`` (``run.pipeline.image_store``);
    a row of the set outside the sample has its images read so only when a family asks for them (``row_set``).
    Raises RowError for bad data, FileNotFoundError for none.
    """
    scanned = scan_rows(data, settings)
    out = {}
    for name, rows in sorted(scanned.items()):
        sampled = sample_rows(rows, rows_per_set, seed)
        loaded = [row.load() for row in sampled] if store is None else waiting_rows(sampled, store)
        out[name] = SampledRows(loaded, row_set(name, rows, loaded, store))
    return out


def row_set(dataset: str, rows: Sequence[SourceRow], sampled: Sequence[Row], store: ImageStore | None) -> RowSet:
    """The row set of ``dataset`` (all its scanned ``rows``): a sampled row's images are its own (``sampled``); another
    row's are read when first asked for, decoded (no ``store``) or waiting in ``store``."""
    own = {row.row_id: row.images for row in sampled}
    scanned: dict[str, SourceRow] = {}  # the rows whose images a cluster's come from (their images unread)

    def images(row_id: str) -> tuple:
        if row_id in own:
            return own[row_id]
        source = scanned[row_id]
        return source.load().images if store is None else waiting_rows([source], store)[0].images

    made = RowSet(dataset, [(row.row, bool(row.images)) for row in rows], images)
    firsts = set(made.image_clusters.values()) - set(own)
    scanned.update((row.row_id, row) for row in rows if row.row_id in firsts)
    return made



@dataclass(frozen=True)
class InputSpec:
    """Where a run's rows come from and how they are read: the question rows (``data``, sampled with
    ``rows_per_set`` and ``seed``, read by ``load``, with the user's ``rephrasings`` and ``translations``
    files) and the caption rows (``captions``, None for none, with the user's ``paraphrases``)."""

    data: Path
    rows_per_set: int = 0
    seed: int = 0
    load: LoadSettings = dataclasses.field(default_factory=LoadSettings)
    rephrasings: Path | None = None
    translations: Path | None = None
    captions: Path | None = None
    paraphrases: Path | None = None

    def inputs_meta(self) -> dict:
        """What the reports' meta records under ``inputs`` (paths as text, None: none): with ``data``, seed and
        rows per set it is what :func:`reread_rows` reads the same rows again from."""
        path = lambda p: None if p is None else str(p)  # noqa: E731
        return {**{k: getattr(self.load, k) for k in READING_RULES}, "captions": path(self.captions),
                "paraphrases": path(self.paraphrases), "rephrasings": path(self.rephrasings),
                "translations": path(self.translations)}

    @classmethod
    def from_meta(cls, data: str | Path, meta: Mapping[str, Any]) -> "InputSpec":
        """The spec a run's meta records (its seed, rows per set and ``inputs``), reading ``data``."""
        inputs = meta.get("inputs") or {}
        path = lambda key: Path(inputs[key]) if inputs.get(key) else None  # noqa: E731
        load = LoadSettings(**{k: inputs[k] for k in READING_RULES if k in inputs})
        return cls(Path(data), int(meta.get("rows_per_set", 0)), int(meta.get("seed", 0)), load,
                   path("rephrasings"), path("translations"), path("captions"), path("paraphrases"))


def source_rows(spec: InputSpec, store: ImageStore | None = None) -> dict[str, list[Row]]:
    """The sampled question rows by dataset, their images waiting in ``store`` when given (RowError for bad data,
    FileNotFoundError for none)."""
    return load_source_rows(spec.data, spec.rows_per_set, spec.seed, spec.load, store)


def attach_user_variants(rows_by_dataset: Mapping[str, list[Row]], rephrasings_path: str | Path | None,
                         translations_path: str | Path | None) -> dict[str, list[Row]]:
    """The rows with the user's rephrasings and translations of the two JSONL files (None: none) in their meta
    (``families.rephrase.attach_variants``); RowError for a bad file."""
    out = dict(rows_by_dataset)
    if rephrasings_path is not None:
        out = attach_variants(out, read_user_file(rephrasings_path, REPHRASINGS), REPHRASINGS)
    if translations_path is not None:
        out = attach_variants(out, read_user_file(translations_path, TRANSLATIONS), TRANSLATIONS)
    return {name: _same_row_set(rows, rows_by_dataset[name]) for name, rows in out.items()}


def _same_row_set(rows: list[Row], before: Sequence[Row]) -> list[Row]:
    """``rows`` with the row set ``before`` carries (``SampledRows``), if it carries one."""
    given = getattr(before, "row_set", None)
    return rows if given is None else SampledRows(rows, given)


def with_user_variants(rows: Mapping[str, list[Row]], spec: InputSpec) -> dict[str, list[Row]]:
    """``rows`` with the user's rephrasings and translations of ``spec`` in their meta (RowError for a bad file)."""
    if spec.rephrasings is None and spec.translations is None:
        return dict(rows)
    return attach_user_variants(rows, spec.rephrasings, spec.translations)


def question_rows(spec: InputSpec, store: ImageStore | None = None) -> dict[str, list[Row]]:
    """The sampled question rows by dataset, with the user's rephrasings and translations in their meta (their
    images waiting in ``store`` when given)."""
    return with_user_variants(source_rows(spec, store), spec)


def with_paraphrases(rows_by_dataset: Mapping[str, Sequence[Row]], path: Path) -> dict:
    """Caption rows with the user's paraphrases of their row id in ``meta["paraphrases"]``."""
    user = load_paraphrases(path)
    return {name: [dataclasses.replace(r, meta={**r.meta, "paraphrases": list(user[r.row_id])})
                   if r.row_id in user else r for r in rows] for name, rows in rows_by_dataset.items()}


def caption_rows(spec: InputSpec) -> dict[str, list[Row]]:
    """The caption rows by dataset (sorted), with the user's paraphrases; {} without ``spec.captions``."""
    if spec.captions is None:
        return {}
    rows = load_captions(spec.captions)
    if spec.paraphrases is not None:
        rows = with_paraphrases(rows, spec.paraphrases)
    return dict(sorted(rows.items()))


def reread_rows(data: str | Path, meta: Mapping[str, Any], store: ImageStore | None = None) -> dict:
    """The rows a run scored, read again as its meta says (seed, rows per set, ``inputs``: reading rules,
    captions, the user's paraphrases, rephrasings and translations), question and caption rows together (the
    question rows' images waiting in ``store`` when given)."""
    spec = InputSpec.from_meta(data, meta)
    return {**question_rows(spec, store), **caption_rows(spec)}


class RunInputs:
    """What a run reads before it scores, each once and only when first asked for: the sampled question rows by
    dataset (their images waiting in ``images``), the caption rows (when ``probes_captions``), the limits and the
    records of ``--baseline``. A bad file is a ``UsageError`` naming its option, file, line and field."""

    def __init__(self, settings, probes_captions: bool):
        self.settings, self.probes_captions = settings, probes_captions
        self.images = ImageStore(settings.image_cache_mb << 20)  # the decoded images kept between uses
        self._rows: dict | None = None
        self._caption_rows: dict | None = None
        self._thresholds = None
        self._baseline: list | None = None
        self._failed: dict[str, UsageError] = {}  # what could not be read: raised again, not read again

    def _once(self, name: str, read):
        """``read()``'s value, or its UsageError, raised again on every later call without reading the file again
        (collection asks for the rows once per parametrised test)."""
        if name in self._failed:
            raise self._failed[name]
        try:
            return read()
        except UsageError as exc:
            self._failed[name] = exc
            raise

    @property
    def spec(self) -> InputSpec:
        """Where the run's rows come from and how they are read (the options)."""
        s = self.settings
        load = LoadSettings(s.data_map, s.max_image_pixels, s.allow_outside_data, s.max_image_side)
        captions = s.captions if self.probes_captions else None
        return InputSpec(s.data, s.rows_per_set, s.seed, load, s.rephrasings, s.translations, captions, s.paraphrases)

    @property
    def rows(self) -> dict[str, list[Row]]:
        """Sampled source rows by dataset, their images waiting in ``images`` (``rows_with_pixels`` gives them
        their pixels)."""
        if self._rows is None:
            self._rows = self._once("rows", self._read_rows)
        return self._rows

    def _read_rows(self) -> dict[str, list[Row]]:
        spec = self.spec
        try:
            rows = source_rows(spec, self.images)
        except (RowError, FileNotFoundError) as exc:
            raise bad_input("--data", exc) from exc
        try:
            return with_user_variants(rows, spec)
        except (RowError, FileNotFoundError) as exc:
            bad = str(getattr(exc, "path", None) or getattr(exc, "filename", None))  # the file it names
            translations = spec.rephrasings is None or bad == str(spec.translations)
            raise bad_input("--translations" if translations else "--rephrasings", exc) from exc

    @property
    def datasets(self) -> list[str]:
        return list(self.rows)

    @property
    def caption_rows(self) -> dict[str, list[Row]]:
        """Caption rows by dataset (when a caption family is selected and a dual encoder is there), else {}."""
        if self._caption_rows is None:
            self._caption_rows = self._once("captions", self._read_captions)
        return self._caption_rows

    def _read_captions(self) -> dict[str, list[Row]]:
        try:
            return caption_rows(self.spec)
        except (RowError, FileNotFoundError) as exc:
            raise bad_input("--captions", exc) from exc

    @property
    def thresholds(self):
        """The limits: ``--thresholds`` with the ``--limitations`` overlay, validated against the declarations."""
        if self._thresholds is None:
            from laya_robustness.gate.run_limits import run_limits
            from laya_robustness.gate.limits_file import ThresholdsError
            from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS

            def read():
                try:
                    return run_limits(self.settings.thresholds, datasets=[*self.rows, *self.caption_rows],
                                      conditions=INVARIANCE_CONDITIONS, limitations=self.settings.limitations)
                except ThresholdsError as exc:
                    raise UsageError(str(exc), "--thresholds", hint="edit that key of the file (the checks and "
                                     "their ranges: docs/verdicts.md; the fixes: docs/errors.md)") from exc

            self._thresholds = self._once("thresholds", read)
        return self._thresholds

    def validate(self) -> None:
        """Read the rows, the limits and the --baseline now: their errors are usage errors before any work starts."""
        self.thresholds  # noqa: B018  (reads the rows too)
        if self.settings.baseline is not None:
            self.baseline_records  # noqa: B018

    @property
    def baseline_records(self) -> list:
        """The records of --baseline."""
        if self._baseline is None:
            self._baseline = self._once("baseline", self._read_baseline)
        return self._baseline

    def _read_baseline(self) -> list:
        from laya_robustness.predictions import PredictionError, read_predictions

        try:
            records = read_predictions(self.settings.baseline)
        except (PredictionError, OSError) as exc:
            raise bad_input("--baseline", exc) from exc
        if not records:
            raise bad_input("--baseline", f"{self.settings.baseline} holds no prediction record (an earlier run's "
                            "predictions.jsonl.gz holds one per scored row)")
        return records


def bad_input(flag: str, problem: object) -> UsageError:
    """A bad input file of option ``flag`` (the problem names its file, line and field). A data source's problems
    (``RowErrors``) say each its fix and where the fields are listed, so nothing is said to type instead: the option
    was typed right."""
    from laya_robustness.run.inputs.options import bad_value

    if isinstance(problem, RowErrors):
        return UsageError(f"{flag}: {problem}", flag)
    return bad_value(flag, problem)
