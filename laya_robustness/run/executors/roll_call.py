"""Which ranks of a ``torch.distributed`` world hold a training callback, told without a collective.

A callback added on some ranks only (``callbacks=[cb] if rank == 0 else []``, as loggers are) must not make a
collective: the other ranks are making their training's own, and gloo aborts on the mismatch. So each rank that
holds it says so once when training begins (``RollCall``: a key in the process group's store, under a
``PrefixStore`` of its own: no collective), and at the first evaluation, before any collective of the gate, the
ranks that hold it read the answer (``RollCall.read``): the first to read decides, from the keys set by then (at an
evaluation before the first step, waiting up to ``WAIT_S`` for the others), and every other reads that same
decision, so they cannot disagree.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass

#: The prefix of the callback's keys in the process group's store.
PREFIX = "laya-robustness/roll-call"
#: Seconds the first rank to read waits for every rank's key before deciding without the missing ones.
WAIT_S = 10.0
#: How many times each name has begun on each rank in this process (a callback may train more than once).
_begun: Counter = Counter()


@dataclass(frozen=True)
class Roll:
    """The ranks that hold the callback (``holders``, lowest first) in a world of ``size`` ranks; ``unknown``: the
    store could not say, and every rank takes rank 0 alone to hold it (the others make no collective)."""

    holders: tuple[int, ...]
    size: int
    unknown: bool = False

    @property
    def every_rank(self) -> bool:
        return len(self.holders) == self.size


def default_store():
    """The default process group's store, or None where torch does not expose it."""
    try:
        from torch.distributed import PrefixStore
        from torch.distributed.distributed_c10d import _get_default_store
    except ImportError:
        return None
    try:
        return PrefixStore(PREFIX, _get_default_store())
    except (RuntimeError, ValueError):
        return None


class RollCall:
    """This rank's answer to the roll call of the callback named ``name`` (the same on every rank: the nth callback of
    that name to begin training on this rank answers the nth roll call), said now, in a world of ``size`` ranks where
    this one is ``rank``; ``says``: what this rank tells the others with its answer (``said``)."""

    def __init__(self, name: str, rank: int, size: int, says: str = "1"):
        self.rank, self.size = rank, size
        _begun[name, rank] += 1
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        self.key = f"{digest}/{_begun[name, rank]}"
        self.store = default_store()
        try:
            if self.store is not None:
                self.store.set(f"{self.key}/rank-{rank}", says)
        except RuntimeError:  # (DistStoreError is one) read() says it cannot tell
            self.store = None

    def read(self, wait: bool = True) -> Roll:
        """The ranks that hold the callback, the same on every one of them; where the store cannot tell, rank 0
        alone (``Roll.unknown``). ``wait``: wait up to ``WAIT_S`` for the missing ones (needless once a training step
        has run: it needed every rank, each past its ``on_train_begin``)."""
        try:
            if self.store is not None:
                return self._read(wait)
        except RuntimeError:
            pass
        return Roll((0,), self.size, unknown=True)

    def _read(self, wait: bool) -> Roll:
        keys, decision = [f"{self.key}/rank-{r}" for r in range(self.size)], f"{self.key}/holders"
        deadline = time.monotonic() + WAIT_S * wait
        while not self.store.check(keys) and not self.store.check([decision]) and time.monotonic() < deadline:
            time.sleep(0.2)
        present = ",".join(str(r) for r, key in enumerate(keys) if self.store.check([key]))
        decided = self.store.compare_set(decision, "", present).decode()
        return Roll(tuple(int(r) for r in decided.split(",")), self.size)

    def said(self, ranks) -> dict[int, str]:
        """What each of ``ranks`` (ranks that answered: ``Roll.holders``) said with its answer; {} where the store
        cannot tell."""
        try:
            if self.store is not None:
                return {r: self.store.get(f"{self.key}/rank-{r}").decode() for r in ranks}
        except RuntimeError:
            pass
        return {}
