"""image_shuffle: each question asked about another image from the same dataset.

Variant ``shuffle``, one per row with images. Within a dataset the distinct images are
the distinct ``cluster`` ids of the rows that have images. The sorted clusters are put
in a seeded random order (``keyed_rng(seed, "image_shuffle", dataset)``) and each one
takes the images of the next one in that order (the last those of the first): a
derangement, so no question gets its own image back, not even through a sibling
question. All rows of a cluster share one donor; the donor's images come from its row
with the smallest row_id. ``meta["donor_cluster"]`` names the donor. A dataset with
fewer than two distinct images gets no variants.

The clusters, and the row each donor's images come from, are those of the dataset's whole row set
(``families.row_set``), not only of the rows sampled: a row's variant is the same whichever other rows
``--rows-per-set`` drew.
"""

from __future__ import annotations

from typing import Sequence

from laya_robustness.families import Family, declare
from laya_robustness.families.row_set import RowSet, row_sets
from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

FAMILY = "image_shuffle"
VARIANT = "shuffle"


def _clusters_by_dataset(rows: Sequence[Row]) -> dict[str, set[str]]:
    dataset_of: dict[str, str] = {}
    for row in rows:
        if row.images and dataset_of.setdefault(row.cluster, row.dataset) != row.dataset:
            other = dataset_of[row.cluster]
            raise ValueError(f"cluster {row.cluster!r} has images in two datasets: {other!r} and {row.dataset!r}")
    by_dataset: dict[str, set[str]] = {}
    for cluster, dataset in dataset_of.items():
        by_dataset.setdefault(dataset, set()).add(cluster)
    return by_dataset


def _derangement(items: Sequence[str], seed: int, dataset: str) -> dict[str, str]:
    if len(items) < 2:
        return {}
    order = [items[i] for i in keyed_rng(seed, FAMILY, dataset).permutation(len(items))]
    return {c: order[(i + 1) % len(order)] for i, c in enumerate(order)}


def donor_clusters(rows: Sequence[Row], seed: int) -> dict[str, str]:
    """cluster -> donor cluster (same dataset, never itself) for every cluster with images."""
    donors: dict[str, str] = {}
    for dataset, clusters in sorted(_clusters_by_dataset(rows).items()):
        donors.update(_derangement(sorted(clusters), seed, dataset))
    return donors


class Donors:
    """The donor of each image cluster of ``rows``' datasets, drawn over each dataset's whole row set (``row_set``,
    or the one ``rows`` carry, for its dataset; the rows themselves for any other): ``donor_clusters`` over the row
    set, and the donor's images from its row with the smallest row_id, which may lie outside ``rows``."""

    def __init__(self, rows: Sequence[Row], seed: int, row_set: RowSet | None = None):
        _clusters_by_dataset(rows)  # a cluster with images in two datasets is refused
        self.sets = row_sets(rows, row_set)
        self.donors = {dataset: _derangement(sorted(dataset_set.image_clusters), seed, dataset)
                       for dataset, dataset_set in self.sets.items()}

    def of(self, row: Row) -> tuple[str, tuple] | None:
        """(donor cluster, its images) of ``row``, or None for a row without images or whose dataset has one image."""
        donor = self.donors[row.dataset].get(row.cluster) if row.images else None
        return None if donor is None else (donor, self.sets[row.dataset].cluster_images(donor))


def build(rows: Sequence[Row], seed: int, row_set: RowSet | None = None) -> list[Row]:
    """Every row with images, given the images of its cluster's donor (drawn over ``row_set``: see ``Donors``)."""
    donors = Donors(rows, seed, row_set)
    out = []
    for row in rows:
        found = donors.of(row)
        if found is not None:
            donor, images = found
            out.append(row.derive(FAMILY, VARIANT, images=images, meta={**row.meta, "donor_cluster": donor}))
    return out


declare(Family(
    name=FAMILY, build=build, kind="control", variants=(VARIANT,), meta_keys={"*": ("donor_cluster",)},
    reads_pixels=False, reads_row_set=True,
    checks=("min_gap",), summary="the image of another image cluster of the dataset (a seeded derangement)",
    title="shuffled image", short="shuffled", table=("acc", "delta"),
))
