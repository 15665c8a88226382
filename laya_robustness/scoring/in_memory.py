"""A model handed over in memory: the transformers model under its wrappers (a peft adapter model, a
DistributedDataParallel, a torch.compile'd module), and whether a processor belongs to it."""

from __future__ import annotations

#: The attributes under which torch's wrappers hold the module they wrap (DistributedDataParallel and FSDP1's
#: ``module``, torch.compile's ``_orig_mod``).
WRAPPED_MODULE = ("module", "_orig_mod")


def unwrapped(model):
    """The transformers model under ``model``'s wrappers: a peft model's ``get_base_model()`` (its adapters stay
    in place in the module tree, so it scores with them, as the peft model's own forward does), the ``module`` of a
    DistributedDataParallel or FSDP1 wrapper, the ``_orig_mod`` of a torch.compile'd model; ``model`` itself when
    it wraps nothing."""
    from transformers import PreTrainedModel

    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        if callable(getattr(type(model), "get_base_model", None)):
            model = model.get_base_model()
            continue
        if not isinstance(model, PreTrainedModel):  # a torch wrapper (which may forward config & co to its module)
            held = getattr(model, "__dict__", {}).get("_modules", {})  # its own submodules, not forwarded ones
            inner = [module for name, module in held.items() if name in WRAPPED_MODULE]
            if inner:
                model = inner[0]
    return model


def processor_mismatch(model, processor) -> str | None:
    """Why ``processor`` does not belong to ``model`` (unwrapped), or None when nothing says it does not: the
    processor class transformers makes for the model's type (``AutoProcessor``) is none of the processor's
    classes, or its tokenizer has more tokens than the model's text embeddings.

    A processor subclass of the model's own processor class belongs to it; a model type transformers has no
    processor class for is judged by its tokenizer alone."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    config = model.config
    model_type = getattr(config, "model_type", None)
    expected = PROCESSOR_MAPPING_NAMES.get(model_type)
    classes = {cls.__name__ for cls in type(processor).__mro__}
    if expected and expected not in classes:
        return (f"{type(processor).__name__} is not the processor of a model of type {model_type!r} (AutoProcessor "
                f"makes {expected} for it)")
    tokenizer = getattr(processor, "tokenizer", None)
    vocab = getattr(config.get_text_config(), "vocab_size", None)
    if tokenizer is not None and vocab and len(tokenizer) > vocab:
        return (f"its tokenizer has {len(tokenizer)} tokens and the text embeddings of the model (type "
                f"{model_type!r}) {vocab}: the tokenizer is not this model's")
    return None


def device_mismatch(model, device: str | None) -> tuple[str, str] | None:
    """Why ``model`` (unwrapped) cannot be scored on ``device`` as it stands, as (the argument to change, why), or
    None: weights on the meta device were never loaded, and a model in memory is scored where its weights are."""
    import torch

    first = next(model.parameters(), None)
    if first is None:
        return "model", "it has no parameters to score with"
    own = first.device
    if own.type == "meta":
        return "model", ("its weights are on the meta device (made without loading them), so there is nothing to "
                         "score: load them (from_pretrained, or to_empty then load_state_dict) first")
    if device is None:
        return None
    try:
        wanted = torch.device(device)
    except (RuntimeError, TypeError):
        return None  # the option's own check names a device that is no device
    if wanted.type != own.type or (wanted.index is not None and wanted.index != (own.index or 0)):
        return "device", (f"{device!r} is not the model's own device {str(own)!r}: a model in memory is scored where "
                          f"its weights are; move it first (model.to({device!r})), or leave device out")
    return None


def adapters(model) -> dict[str, dict] | None:
    """The peft adapters a model in memory carries (``peft_config``, set by peft on the model it wraps), by name:
    their kind, base model, rank, alpha and target modules where the kind has them; None without any.

    >>> class Config:
    ...     peft_type, base_model_name_or_path, r, lora_alpha, target_modules = "LORA", "base", 4, 8, {"v", "q"}
    >>> class Model:
    ...     peft_config = {"default": Config()}
    >>> adapters(Model())
    {'default': {'kind': 'LORA', 'base_model': 'base', 'r': 4, 'alpha': 8, 'target_modules': ['q', 'v']}}
    """
    configs = getattr(model, "peft_config", None)
    if not configs or not isinstance(configs, dict):
        return None
    out = {}
    for name, config in sorted(configs.items()):
        kind = getattr(config, "peft_type", None)
        described = {"kind": str(getattr(kind, "value", kind)),
                     "base_model": getattr(config, "base_model_name_or_path", None),
                     "r": getattr(config, "r", None), "alpha": getattr(config, "lora_alpha", None),
                     "target_modules": sorted(getattr(config, "target_modules", None) or [])}
        out[name] = {key: value for key, value in described.items() if value not in (None, [])}
    return out
