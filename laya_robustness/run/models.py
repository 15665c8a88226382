"""What a run knows about its models, found once from its settings (``RunModels.of``): the question model (a
checkpoint, a model in memory or a served model) and whether it is a dual encoder, the dual encoder its caption
families probe, whether the rows are the user's own; and from that, which families and conditions the models cannot
take, and why. A frozen value: the run, its executors and its adapters read it, none changes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from laya_robustness.embedded import EMBEDDED_DUAL_MODEL
from laya_robustness.run.pipeline.scorer_sources import DUAL_ENCODER_TYPES, is_dual_encoder
from laya_robustness.scoring.factory import SERVED_SCORER
from laya_robustness.scoring.in_memory import unwrapped


def served_without_dual(what: str) -> str:
    """Why ``what`` (a caption family, the dual encoder's conditions) does not run with a served model alone."""
    return (f"{what} probes a dual encoder (CLIP / SigLIP caption similarities), which a chat model behind a "
            "server does not give: it answers questions only (pass --dual-model to probe one)")


@dataclass(frozen=True)
class RunModels:
    """A run's models: ``name`` as the user named it, ``model`` the checkpoint (None: in memory, or the endpoint's
    only model), ``served`` (``--scorer openai``: it answers in text over requests), ``in_memory`` (a model loaded in
    memory, scored as it stands), ``is_dual`` (a dual encoder: it answers no questions, it is probed),
    ``dual_model`` (the dual encoder the caption families probe, or None), ``own_data`` (``--data`` other than the
    embedded rows) and ``embedded_model`` (the model is the embedded default's)."""

    name: str
    model: str | None
    served: bool
    in_memory: bool
    is_dual: bool
    dual_model: str | None
    own_data: bool
    embedded_model: bool

    @classmethod
    def of(cls, settings, root: Path) -> RunModels:
        """The models of ``settings`` (``run.inputs.options.Settings``; ``root``: where the embedded default lives).
        ``dual_model`` left to ``auto``: the ``--model`` when it is a dual encoder; the embedded dual encoder beside
        the embedded model when the rows are the embedded ones too or ``--captions`` names caption rows (a run on
        one's own ``--data`` is about its rows)."""
        in_memory = settings.in_memory
        served = settings.scorer == SERVED_SCORER
        if in_memory is not None:
            is_dual = getattr(unwrapped(in_memory.model).config, "model_type", None) in DUAL_ENCODER_TYPES
        else:
            is_dual = settings.scorer == "hf" and settings.model is not None and is_dual_encoder(settings.model)
        embedded = settings.is_embedded
        dual = settings.dual_model
        if dual == "auto":
            if served or in_memory is not None:  # weights behind a server, or in memory: no dual encoder
                dual = None
            elif is_dual:
                dual = settings.model
            elif embedded("model") and (embedded("data") or not embedded("captions")):
                dual = str(Path(root) / EMBEDDED_DUAL_MODEL)
            else:
                dual = None
        return cls(name=settings.model_name, model=settings.model, served=served, in_memory=in_memory is not None,
                   is_dual=is_dual, dual_model=dual, own_data=not embedded("data"),
                   embedded_model=embedded("model"))

    def source_model(self, source: str) -> str | None:
        """The model scoring ``source`` rows: the dual encoder for captions, else the model (a model in memory by
        its name)."""
        if source == "captions":
            return self.dual_model
        return self.name if self.in_memory else self.model

    def probes_captions(self, families) -> bool:
        """Whether caption rows are read: a caption family is among ``families`` and a dual encoder is there."""
        from laya_robustness.families import get_family

        return self.dual_model is not None and any(get_family(f).source == "captions" for f in families)

    def skip_reason(self, family: str) -> str | None:
        """Why a family cannot run with these models, or None."""
        from laya_robustness.families import get_family

        source = get_family(family).source
        if source == "rows" and self.is_dual:
            return (f"{self.name} is a dual encoder: it answers no questions, so {family} does not "
                    "apply (the lgip families probe it)")
        if source == "captions":
            return self.no_dual_reason(family)
        return None

    def no_dual_reason(self, what: str) -> str | None:
        """Why ``what`` (a caption family, the dual encoder's conditions) does not run: no dual encoder; or None."""
        if self.dual_model is not None:
            return None
        if self.served:
            return served_without_dual(what)
        if self.embedded_model:  # one reason for every caption test, so a run's skips count it once
            return (f"the embedded dual encoder (the lgip families, test_dual_invariance) is probed with the "
                    f"embedded rows only: on your own --data ask for it with --dual-model {EMBEDDED_DUAL_MODEL} (or "
                    "probe yours with --dual-model and --captions)")
        return ("the lgip families and test_dual_invariance probe a dual encoder and none is given: pass a CLIP / "
                "SigLIP --model, or --dual-model <hub id or directory>")
