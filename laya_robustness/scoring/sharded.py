"""A model whose weights are sharded over the ranks (FSDP2's ``fully_shard``, DeepSpeed ZeRO-3) made whole while it
is scored.

``whole_weights(model)`` all-gathers every FSDP2 module's parameters on every rank (``FSDPModule.unshard``, in module
order: a collective every rank makes together), keeps them gathered through every forward the gate makes, and puts
the shards back on leaving (``reshard``), each module's own reshard-after-forward setting restored. While inside,
the module holds plain full tensors, so the gate scores and hashes the weights a saved checkpoint holds, and each
rank's forwards hold no collective (the ranks may make different numbers of them: ``run.executors.distributed``).
The cost is the whole unsharded weights on each rank while the gate runs (no gradients, no optimiser state). A model
trained under DeepSpeed has its ZeRO-3 partitions gathered the same way, and DeepSpeed's forward hooks (ZeRO-3's
fetches, the engine's timers) set aside under every stage (``scoring.deepspeed_zero``); a model whose weights are whole
is otherwise left as it is. FSDP1's ``FullyShardedDataParallel``
wrapper is refused (``sharded_by``): its units all-gather inside each forward; so is a model whose parameters are
sharded by what the gate does not know (a DTensor no FSDP2 module holds, as tensor parallelism makes, or a
parameter with no elements here).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from laya_robustness.scoring.deepspeed_zero import gathered, hooks_set_aside, zero3_params


def fsdp2_modules(model) -> list:
    """The modules of ``model`` that FSDP2's ``fully_shard`` sharded, in module order (none without
    torch.distributed)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def fsdp1_wrapped(model) -> bool:
    """Whether ``model`` holds an FSDP1 ``FullyShardedDataParallel`` unit (around it or within it)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:
        return False
    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules())


def sharded_by(model) -> str | None:
    """``"fsdp2"`` for a model sharded by ``fully_shard``, ``"zero3"`` for one partitioned by DeepSpeed ZeRO-3,
    ``"fsdp1"`` for one wrapped in ``FullyShardedDataParallel``, ``"unknown"`` for one with parameters sharded by
    something else (``unknown_shards``), None for a model whose weights are whole."""
    if fsdp1_wrapped(model):
        return "fsdp1"
    if zero3_params(model):
        return "zero3"
    if unknown_shards(model):
        return "unknown"
    return "fsdp2" if fsdp2_modules(model) else None


def unknown_shards(model) -> list[str]:
    """The names of ``model``'s parameters that are not whole here and that neither FSDP2 nor ZeRO-3 holds: a DTensor
    outside every FSDP2 module (tensor parallelism), or a parameter with no elements."""
    held = {id(p) for module in fsdp2_modules(model) for p in module.parameters()}
    return [name for name, p in model.named_parameters()
            if id(p) not in held and (_is_dtensor(p) or p.numel() == 0)]


def _is_dtensor(tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return isinstance(tensor, DTensor)


@contextlib.contextmanager
def whole_weights(model) -> Iterator[None]:
    """``model``'s FSDP2-sharded or ZeRO-3-partitioned weights gathered on every rank, and DeepSpeed's forward hooks
    set aside, while inside (see the module doc); nothing happens for a model whose weights are whole and which
    DeepSpeed does not hook."""
    if zero3_params(model):
        with gathered(model):
            yield
        return
    with hooks_set_aside(model), fsdp2_whole(model):
        yield


@contextlib.contextmanager
def fsdp2_whole(model) -> Iterator[None]:
    """``model``'s FSDP2-sharded weights gathered on every rank while inside; nothing for a model without FSDP2
    modules."""
    modules = fsdp2_modules(model)
    if not modules:
        yield
        return
    states = [m._get_fsdp_state() for m in modules]
    saved = [(s._auto_reshard_after_forward, [g.post_forward_mesh_info for g in s._fsdp_param_groups])
             for s in states]
    root = states[0]
    root._lazy_init()  # as the root's first forward would: a part (the vision tower) may be called before it
    try:
        for module in modules:
            module.unshard()
        for module in modules:
            module.set_reshard_after_forward(False, recurse=False)
        yield
    finally:
        for state, (auto, infos) in zip(states, saved):
            state._auto_reshard_after_forward = auto
            for group, info in zip(state._fsdp_param_groups, infos):
                group.post_forward_mesh_info = info
        for module in modules:
            module.reshard()
