"""A model trained under DeepSpeed scored as it stands, each rank's forwards free of collectives.

Under every ZeRO stage the engine hooks the model's forwards (timers, the profiler; under ZeRO-3 each module's hooks
also fetch its partitioned parameters before its forward and release them after: collectives, and the ranks score
different rows with different numbers of forwards). ``hooks_set_aside`` takes DeepSpeed's forward hooks off every
module while the gate scores and puts them back as they were (the same hooks, ids and order: nothing is registered
again, so ZeRO-3's recorded trace stays valid). Under ZeRO-3, ``gathered`` first gathers every parameter that is
partitioned on every rank with DeepSpeed's own ``deepspeed.zero.GatheredParameters`` (one collective every rank
makes together) and partitions it again on leaving; the parameters already whole (ZeRO-3's persistent ones) are left
as they are. Before gathering, the ranks agree on what they gather and that each has room for it (``room``): the
cost is the partitioned weights made whole, in their training dtype, on each rank while the gate runs (gradients and
optimiser state stay partitioned).

DeepSpeed's ``deepspeed.zero.unwrap_model_for_generation`` is not used: it needs the engine, releases the persistent
parameters too, leaves the root module's hook (whose ``reset_step`` checks the trace with a collective while the
trace is being recorded) and registers the hooks again only when its body does not raise.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

#: The forward hook tables of a module that DeepSpeed's engine and ZeRO-3 register into.
HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks")


class GatherError(RuntimeError):
    """The ranks cannot gather a ZeRO-3 model's weights for the gate (no room, or they hold different parts);
    raised on every rank alike, before any gather."""


def zero3_params(model) -> list:
    """The parameters of ``model`` that ZeRO-3 partitioned (DeepSpeed's ``ds_id`` on them), each once."""
    return list({id(p): p for p in model.parameters() if hasattr(p, "ds_id")}.values())


def from_deepspeed(hook) -> bool:
    """Whether ``hook`` (a function, method or ``functools.partial``) was defined in DeepSpeed's package."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    return (getattr(hook, "__module__", None) or "").split(".")[0] == "deepspeed"


@contextlib.contextmanager
def hooks_set_aside(model) -> Iterator[int]:
    """DeepSpeed's forward hooks taken off every module of ``model`` while inside (their number given), put back
    as they were on leaving, whatever happens inside."""
    saved = []
    for module in model.modules():
        for name in HOOK_TABLES:
            table = getattr(module, name)
            ours = [key for key, hook in table.items() if from_deepspeed(hook)]
            if ours:
                saved.append((table, dict(table)))
                for key in ours:
                    del table[key]
    try:
        yield sum(len(before) - len(table) for table, before in saved)
    finally:
        for table, before in saved:
            table.clear()
            table.update(before)


def partitioned(model) -> list:
    """The ZeRO-3 parameters of ``model`` not whole on this rank now, in DeepSpeed's order (``ds_id``)."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    return sorted((p for p in zero3_params(model) if p.ds_status != ZeroParamStatus.AVAILABLE), key=lambda p: p.ds_id)


def gathered_bytes(params) -> int:
    """The bytes ``params`` take once whole (their full sizes in their dtype)."""
    return sum(p.ds_numel * p.element_size() for p in params)


def free_bytes(device) -> int | None:
    """The memory free on ``device`` (a CUDA device's, with what PyTorch's allocator holds unused; this machine's for
    the CPU); None where unknown."""
    import torch

    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0] + cached)
    if device.type != "cpu":
        return None
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def room(params, device) -> None:
    """Every rank's view of the gather (what it would gather, the bytes, its free memory), shared with one
    ``all_gather_object``; ``GatherError`` on every rank alike where the ranks would gather different parameters
    or one has no room."""
    import torch.distributed as dist

    need = gathered_bytes(params)
    mine = ([p.ds_id for p in params], need, free_bytes(device))
    views: list = [mine] * dist.get_world_size()
    if len(views) > 1:
        dist.all_gather_object(views, mine)
    if any(ids != views[0][0] for ids, _, _ in views):
        raise GatherError("the ranks hold different ZeRO-3 parameters partitioned (a rank is mid-forward?): the "
                          "gate gathers none")
    short = [f"rank {rank}: {free / 2**20:.0f} MiB free" for rank, (_, _, free) in enumerate(views)
             if free is not None and free < need]
    if short:
        raise GatherError(f"gathering the ZeRO-3 weights whole for the gate needs {need / 2**20:.0f} MiB on each "
                          f"rank; {', '.join(short)}")


@contextlib.contextmanager
def gathered(model) -> Iterator[int]:
    """``model``'s ZeRO-3 weights whole on every rank and DeepSpeed's forward hooks set aside while inside (the bytes
    gathered on this rank given); see the module doc. Every rank enters it together."""
    import deepspeed

    params = partitioned(model)
    device = next(iter(model.parameters())).device
    room(params, device)
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        with hooks_set_aside(model):
            yield gathered_bytes(params)
