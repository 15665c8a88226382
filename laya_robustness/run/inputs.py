"""A run's rows: the sampled source rows of every dataset under ``--data`` with the user's rephrasings and
translations attached, and the caption rows with the user's paraphrases; read once at the start of a run,
and read again the same way from a finished run's meta (``reread_rows``: the report and the layerwise
analysis rebuild what the run scored). Given an image store (``run.images.ImageStore``), the question rows'
images wait in it, each decoded once at load for its content key; without one they are decoded and held."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from laya_robustness.families.lgip.variants import load_paraphrases
from laya_robustness.families.rephrase import attach_user_variants
from laya_robustness.loaders import LoadSettings, scan_rows
from laya_robustness.loaders.captions import load_captions
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row
from laya_robustness.run.images import ImageStore, waiting_rows

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
                     store: ImageStore | None = None) -> dict[str, list[Row]]:
    """The sampled source rows of every dataset under ``data``, by dataset name (sorted).

    Every row is validated and every image checked from its header first; then every sampled row's
    images are decoded, held (no ``store``) or only keyed and left waiting in ``store`` (``run.images``).
    Raises RowError for bad data, FileNotFoundError for none.
    """
    scanned = scan_rows(data, settings)
    sampled = {name: sample_rows(rows, rows_per_set, seed) for name, rows in sorted(scanned.items())}
    if store is None:
        return {name: [row.load() for row in rows] for name, rows in sampled.items()}
    return {name: waiting_rows(rows, store) for name, rows in sampled.items()}



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
