"""What one Ray actor of ``--executor ray`` holds: the run's scorers, loaded once on it, scoring the rows sent."""

from __future__ import annotations

import threading
from typing import Callable, Mapping, Sequence

from laya_robustness.records import Record
from laya_robustness.rows import Row
from laya_robustness.run.device_names import device_name
from laya_robustness.run.executors.base import forget_images
from laya_robustness.run.pipeline.chunks import Scoring
from laya_robustness.run.pipeline.image_store import DEFAULT_IMAGE_CACHE_BYTES, ImageStore, bind_images, rows_with_pixels
from laya_robustness.run.pipeline.invariance import InvarianceRun
from laya_robustness.run.pipeline.scorer_sources import load_source_scorer
from laya_robustness.run.pipeline.variant_rows import family_variants, image_counts
from laya_robustness.scoring.malloc import give_back_freed_memory
from laya_robustness.scoring.malloc import keep_freed_memory as keep_malloc_freed_memory


def actor_device(device: str) -> str:
    """The device an actor loads on: ``cuda`` for any CUDA device (Ray gives each actor its own GPU as cuda:0)."""
    return "cuda" if device.startswith("cuda") else device


def load_scoring(settings, model: str, device: str, dual: bool) -> Scoring:
    """The run's ``Scoring`` on an actor: its scorer (``load_source_scorer``), path and temperatures."""
    return Scoring(load_source_scorer(settings, model, device, dual), settings.scoring_path, settings.temperatures)


class ScoringActor:
    """The body of one actor: the ``Scoring`` of each row source (``loads[source]()``), each loaded once on
    first use, and their invariance runs. Rows arrive with their images waiting (``run.pipeline.image_store``: a source image
    as its file's bytes, a variant image as the recipe that builds it); the actor makes their pixels, holding what it
    made in its own image store of ``image_cache_bytes`` until the front end says no row waits for it. With
    ``keep_freed_memory`` (``--keep-freed-memory``, as in the front end) malloc keeps freed memory for reuse
    (``scoring.malloc``); it is given back after every call.

    The actor may run calls side by side (``RayActorPool``'s ``max_concurrency``): a chunk's pixels, or a group's
    variants, are made while another chunk is scored; each scorer is loaded once, and used (scoring, forgetting, the
    invariance runs) by one call at a time (``device_lock``)."""

    def __init__(self, loads: Mapping[str, Callable[[], Scoring]], device: str,
                 image_cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES, keep_freed_memory: bool = False):
        self.loads, self.device = dict(loads), device
        self.scorings: dict[str, Scoring] = {}
        self._invariance: dict[str, InvarianceRun] = {}
        self.store = ImageStore(image_cache_bytes)
        self.keeps_freed_memory = keep_freed_memory and keep_malloc_freed_memory()
        self.device_lock, self.loading_lock = threading.Lock(), threading.Lock()

    def _scoring(self, source: str) -> Scoring:
        with self.loading_lock:  # not the device's: a chunk's pixels are made while another chunk is scored
            if source not in self.scorings:
                self.scorings[source] = self.loads[source]()
            return self.scorings[source]

    def prepare(self, sources: Sequence[str]) -> dict:
        """Load the scorers of ``sources``; say the node (its IP address) and device this actor runs on, each
        scorer's identity and whether its malloc keeps freed memory."""
        import ray

        identities = {source: dict(getattr(self._scoring(source).scorer, "identity", {})) for source in sources}
        return {"node": ray.util.get_node_ip_address(), "device_name": device_name(self.device),
                "identities": identities, "keeps_freed_memory": self.keeps_freed_memory}

    def records(self, source: str, rows: Sequence[Row]) -> list[Record]:
        """The records of ``rows``, their pixels made here while another call may be scoring (and the memory they
        took given back after)."""
        try:
            scoring, rows = self._scoring(source), rows_with_pixels(bind_images(rows, self.store))
            with self.device_lock:
                return scoring.records(rows)
        finally:
            give_back_freed_memory()

    def variants(self, source: str, rows: Sequence[Row], family: str, seed: int, keep: bool = False) -> list[Row]:
        """``family``'s variant rows of the source ``rows`` (``run.pipeline.variant_rows.family_variants``), built here:
        their images wait in this actor's store, and travel back as the recipes that build them; with ``keep``, each
        source row's new images are also kept in Ray's object store for the actor that scores them
        (``VariantBuild.keep``)."""
        on_built = (lambda build, images: build.keep(images)) if keep else None
        try:
            return family_variants(family, bind_images(rows, self.store), seed, self.store, on_built)
        finally:
            give_back_freed_memory()

    def image_counts(self) -> dict:
        """The variant images this actor built, kept, took from another actor and built again
        (``run.pipeline.variant_rows.IMAGE_COUNTS``)."""
        return image_counts()

    def forget_images(self, source: str, digests: Sequence[str]) -> None:
        """Let the store and ``source``'s scorer forget these images, where it can (``forget_images``;
        ``run.pipeline.variant_rows``)."""
        self.store.forget(digests)
        with self.device_lock:
            if source in self.scorings:
                forget_images(self.scorings[source].scorer, digests)

    def invariance(self, source: str, condition: str, rows: Sequence[Row], batch_size: int, temperatures) -> dict:
        """One invariance condition's stats on this actor's ``source`` scorer (each reference computed once)."""
        scorer = self._scoring(source).scorer
        with self.device_lock:
            if source not in self._invariance:
                self._invariance[source] = InvarianceRun(scorer, rows, batch_size, temperatures)
            return self._invariance[source].run(condition)
