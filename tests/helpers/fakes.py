"""Fake scorers for the tests (a gate run names one as the plug-in ``helpers.fakes:<name>``): deterministic, fast,
and one that is deliberately not batch-invariant."""

from __future__ import annotations

import numpy as np

from laya_robustness.rng import keyed_rng
from laya_robustness.scoring.base import to_label_order


class OracleScorer:
    """Prefers the gold option by ``margin`` plus keyed noise per (row, option): wrong sometimes, never random.

    A row without images is scored as noise alone, so the no-image control drops accuracy; an image
    from another cluster (image_shuffle) is detected through the row's ``meta["donor_cluster"]``.
    """

    def __init__(self, model: str, margin: float = 1.0, noise: float = 1.0, **kwargs):
        self.identity = {"model": model, "weights_sha256": {}, "fake": type(self).__name__}
        self.margin, self.noise = margin, noise

    def _shown_logits(self, row) -> np.ndarray:
        k = len(row.options)
        rng = keyed_rng(0, "fake", row.row_id)
        logits = self.noise * rng.standard_normal(k)
        sees_own_image = bool(row.images) and "donor_cluster" not in row.meta
        if sees_own_image and row.label >= 0:
            logits[row.label] += self.margin
        shown = logits if row.display_order is None else logits[list(row.display_order)]
        return shown

    def score_batch(self, rows):
        return [to_label_order(r, self._shown_logits(r)) for r in rows]

    def score_predict(self, rows, use_cache: bool = True):
        return self.score_batch(rows)


class NeighbourDependentScorer(OracleScorer):
    """Not batch-invariant on purpose: every logit moves with the number of rows in its batch."""

    def score_batch(self, rows):
        return [lg + 1e-3 * len(rows) for lg in super().score_batch(rows)]


def oracle(model, **kwargs):
    return OracleScorer(model)


def neighbour_dependent(model, **kwargs):
    return NeighbourDependentScorer(model)


def broken(model, **kwargs):
    raise OSError(f"no checkpoint at {model}")


class CrashingScorer(OracleScorer):
    """Breaks while scoring, as a scorer that does not understand a model's inputs would."""

    def score_batch(self, rows):
        raise IndexError("tuple index out of range")


def crashing(model, **kwargs):
    return CrashingScorer(model)


class InterruptingScorer(OracleScorer):
    """Stops the run as Ctrl-C would, once it has scored ``after`` batches."""

    def __init__(self, model, after: int = 2, **kwargs):
        super().__init__(model, **kwargs)
        self.after, self.calls = after, 0

    def score_batch(self, rows):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return super().score_batch(rows)


def interrupting(model, **kwargs):
    return InterruptingScorer(model)


class CountingScorer(OracleScorer):
    """Appends the number of rows of every batch to the file named by LAYA_COUNT_FILE (and, to LAYA_THREADS_FILE
    where it is set, the xdist worker and the names of the threads alive, their pool numbers dropped); slow if
    LAYA_SLOW (seconds per call) or LAYA_SLOW_PER_ROW (seconds per row: a device-bound model) is set; after its
    first batch, waits while the file named by LAYA_HOLD_FILE exists (a run a test holds in the middle of
    scoring)."""

    def score_batch(self, rows):
        import os
        import threading
        import time

        with open(os.environ["LAYA_COUNT_FILE"], "a") as fh:
            fh.write(f"{len(rows)}\n")
        if os.environ.get("LAYA_THREADS_FILE"):
            names = sorted({thread.name.rsplit("_", 1)[0] for thread in threading.enumerate()})
            with open(os.environ["LAYA_THREADS_FILE"], "a") as fh:
                fh.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {' '.join(names)}\n")
        while os.environ.get("LAYA_HOLD_FILE") and os.path.exists(os.environ["LAYA_HOLD_FILE"]):
            time.sleep(0.05)
        if os.environ.get("LAYA_SLOW"):
            time.sleep(float(os.environ["LAYA_SLOW"]))
        if os.environ.get("LAYA_SLOW_PER_ROW"):
            time.sleep(float(os.environ["LAYA_SLOW_PER_ROW"]) * len(rows))
        return super().score_batch(rows)


def counting(model, **kwargs):
    return CountingScorer(model)


class ImageCensusScorer(OracleScorer):
    """Counts, at every batch, the decoded PIL images alive in the whole process (``gc``) and their bytes, and
    writes the largest counts seen to the JSON file named by LAYA_CENSUS_FILE: what a run holds decoded while
    it scores, whoever holds it."""

    def __init__(self, model, **kwargs):
        super().__init__(model, **kwargs)
        self.most = {"images": 0, "bytes": 0, "batches": 0}

    def score_batch(self, rows):
        import json
        import os

        alive = images_alive()
        self.most["images"] = max(self.most["images"], len(alive))
        self.most["bytes"] = max(self.most["bytes"], sum(o.width * o.height * len(o.getbands()) for o in alive))
        self.most["batches"] += 1
        with open(os.environ["LAYA_CENSUS_FILE"], "w") as fh:
            json.dump(self.most, fh)
        return super().score_batch(rows)


def images_alive() -> list:
    """Every PIL image alive in this process. ``gc.get_objects`` also hands out the tuples other threads are still
    building (``tuple(iterator)``): held by the list while those threads run, such a tuple cannot be resized and its
    thread raises SystemError. So no other thread runs between the call and the list's end: the interpreter does
    not switch threads before the interval, made longer than the census."""
    import gc
    import sys

    from PIL import Image

    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        objects = gc.get_objects()
        alive = [o for o in objects if issubclass(type(o), Image.Image)]
        del objects
    finally:
        sys.setswitchinterval(interval)
    return alive


def image_census(model, **kwargs):
    return ImageCensusScorer(model)


class Unpicklable(IndexError):
    """An exception that cannot be unpickled: its ``__init__`` takes two arguments and its ``args`` hold one (Ray
    cannot send it back from an actor whole)."""

    def __init__(self, what, where):
        super().__init__(f"{what} {where}")


class SlowScorer(OracleScorer):
    """A device-bound model in miniature: every row costs ``LAYA_SLOW_PER_ROW`` seconds (a fixed sleep); where
    ``LAYA_PID_DIR`` is set, the process that loads it leaves an empty file named by its pid there (and then takes
    ``LAYA_LOAD_S`` seconds to load, where that is set); where
    ``LAYA_COUNT_FILE`` is set, each call appends its number of rows to it; where ``LAYA_CALLS_FILE`` is set,
    each call appends ``pid start end cells`` to it (wall-clock seconds; the ``family/dataset`` of its rows, by
    commas); where ``LAYA_CRASH_FAMILY`` is set, a call with a row of that family raises (an ``Unpicklable`` where
    ``LAYA_CRASH_UNPICKLABLE`` is set too)."""

    def __init__(self, model, **kwargs):
        import os

        super().__init__(model, **kwargs)
        self.per_row = float(os.environ.get("LAYA_SLOW_PER_ROW", "0"))
        if os.environ.get("LAYA_PID_DIR"):
            open(os.path.join(os.environ["LAYA_PID_DIR"], str(os.getpid())), "w").close()
        if os.environ.get("LAYA_LOAD_S"):  # a model that takes a while to load (killed meanwhile by a test)
            import time

            time.sleep(float(os.environ["LAYA_LOAD_S"]))

    def score_batch(self, rows):
        import os
        import time

        start = time.time()
        if any(r.family == os.environ.get("LAYA_CRASH_FAMILY") for r in rows):
            if os.environ.get("LAYA_CRASH_UNPICKLABLE"):
                raise Unpicklable("tuple index out of range", f"(a {rows[0].family} row)")
            raise IndexError(f"tuple index out of range (a {rows[0].family} row)")
        time.sleep(self.per_row * len(rows))
        if os.environ.get("LAYA_CALLS_FILE"):
            with open(os.environ["LAYA_CALLS_FILE"], "a") as fh:
                cells = ",".join(sorted({f"{r.family}/{r.dataset}" for r in rows}))
                fh.write(f"{os.getpid()} {start} {time.time()} {cells}\n")
        if os.environ.get("LAYA_COUNT_FILE"):
            with open(os.environ["LAYA_COUNT_FILE"], "a") as fh:
                fh.write(f"{len(rows)}\n")
        return super().score_batch(rows)


def slow(model, **kwargs):
    return SlowScorer(model)


def slow_scoring(per_row: float, calls_file: str = ""):
    """The ``Scoring`` of a ``SlowScorer`` whose rows cost ``per_row`` seconds each (for an executor's actors),
    each call written to ``calls_file`` when one is named."""
    import os

    from laya_robustness.run.pipeline.chunks import Scoring

    os.environ["LAYA_SLOW_PER_ROW"] = str(per_row)
    if calls_file:
        os.environ["LAYA_CALLS_FILE"] = calls_file
    return Scoring(SlowScorer("slow-model"))


class PixelScorer(SlowScorer):
    """A ``SlowScorer`` that reads every pixel of every image: each image's content moves the logits, so rows
    whose images were made elsewhere with other pixels score otherwise."""

    def _shown_logits(self, row) -> np.ndarray:
        import hashlib

        logits = super()._shown_logits(row)
        for image in row.images:
            digest = hashlib.sha256(image.tobytes()).digest()
            logits = logits + 0.25 * np.frombuffer(digest[:len(logits)], dtype=np.uint8) / 255
        return logits


def pixels(model, **kwargs):
    return PixelScorer(model)


class FailingScorer(PixelScorer):
    """Raises ``error`` at its ``at``-th call."""

    def __init__(self, error: BaseException, at: int):
        super().__init__("fake")
        self.error, self.at, self.calls = error, at, 0

    def score_batch(self, rows):
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return super().score_batch(rows)
