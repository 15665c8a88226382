"""A dataset's whole row set, as the families that draw from other rows read it (``Family.reads_row_set``): the
image clusters with the row each one's images come from, and the options of the choice rows. Built from every row
of the dataset, whichever rows ``--rows-per-set`` sampled, so that a sampled row's variants are the questions the
run of every row asks it.

A run's sampled rows carry their dataset's row set (``SampledRows.row_set``); ``families.build_variants`` hands it
to the builders that read one. Rows without one are their own row set (``RowSet.of``).
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Sequence

from laya_robustness.rows import Row

#: ``images(row_id)``: the images of a row of the set (loaded on first use where the row was not sampled).
ImagesOf = Callable[[str], tuple]


class RowSet:
    """One dataset's rows, as far as the families that draw across rows need them (see the module doc).

    ``rows``: (row, whether it has images) for every row of ``dataset`` (a row's fields; its images may be left
    out); ``images(row_id)`` gives a row's images, each row's asked once (the answer is kept).
    ``image_clusters``: cluster -> the smallest row id among its rows with images (the row its images come from);
    ``choice_options``: (row_id, cluster, option) of every option of the choice rows, sorted.
    """

    def __init__(self, dataset: str, rows: Iterable[tuple[Row, bool]], images: ImagesOf):
        self.dataset = dataset
        self.image_clusters: dict[str, str] = {}
        options = []
        for row, has_images in rows:
            if row.dataset != dataset:
                raise ValueError(f"row set of dataset {dataset!r} given row {row.row_id!r} of {row.dataset!r}")
            first = self.image_clusters.get(row.cluster)
            if has_images and (first is None or row.row_id < first):
                self.image_clusters[row.cluster] = row.row_id
            if row.primitive == "choice":
                options += [(row.row_id, row.cluster, option) for option in row.options]
        self.choice_options = tuple(sorted(options))
        self._images, self._loaded, self._lock = images, {}, threading.Lock()

    @classmethod
    def of(cls, rows: Sequence[Row]) -> dict[str, "RowSet"]:
        """Rows as their own row sets, by dataset (their images as they are)."""
        by_dataset: dict[str, list[Row]] = {}
        for row in rows:
            by_dataset.setdefault(row.dataset, []).append(row)
        out = {}
        for dataset, own in by_dataset.items():
            by_id = {row.row_id: row for row in own}
            out[dataset] = cls(dataset, [(row, bool(row.images)) for row in own], lambda rid, b=by_id: b[rid].images)
        return out

    def cluster_images(self, cluster: str) -> tuple:
        """The images of ``cluster``: those of its row with the smallest row id (KeyError: no such image cluster)."""
        row_id = self.image_clusters[cluster]
        with self._lock:
            if row_id not in self._loaded:
                self._loaded[row_id] = tuple(self._images(row_id))
            return self._loaded[row_id]


class SampledRows(list):
    """The sampled rows of one dataset (a list), with the ``row_set`` they were sampled from. The row set stays in
    the process that read the rows (it reads the rows' files): pickled (sent to a Ray actor), they are a list."""

    def __init__(self, rows: Iterable[Row], row_set: RowSet):
        super().__init__(rows)
        self.row_set = row_set

    def __reduce__(self):
        return list, (list(self),)


def row_sets(rows: Sequence[Row], given: RowSet | None = None) -> dict[str, RowSet]:
    """The row set of each dataset of ``rows``: ``given`` (or the one ``rows`` carry, ``SampledRows.row_set``) for its
    dataset, the rows themselves for any other."""
    given = given if given is not None else getattr(rows, "row_set", None)
    out = RowSet.of([row for row in rows if given is None or row.dataset != given.dataset])
    if given is not None:
        out[given.dataset] = given
    return out
