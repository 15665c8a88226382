"""The gate while a model trains: ``RobustnessCallback``, a ``transformers.TrainerCallback`` that gates the
trainer's model in memory at each evaluation (or each save) and logs the headline numbers through the Trainer's
own logging, so every ``report_to`` integration (TensorBoard, Weights & Biases, MLflow, ...) receives them.

At each event it runs ``run_gate``'s checks (``api.judge_run``) on the model as it stands (eval mode and
``torch.no_grad`` while it is scored, its mode restored, on its own device) over the rows of ``data``; the rows
are read and their variants built once, at the first evaluation, and reused at every later one. It logs
``robustness/<family>/<dataset>/<metric>`` for each headline number (accuracy, delta and flip rate; each extension
family's own, such as ASR) and ``robustness/failed_checks``, writes the evaluation's reports to
``<report_dir>/checkpoint-<global step>/`` (the Trainer's own naming), and with ``stop_on_fail`` stops training
when a check fails, naming it. Under distributed training only the main process scores (the others wait at their
next collective); the stop decision is broadcast so every rank stops together.

>>> callback = RobustnessCallback(data="laya_fixtures/rows", families=["option_order"], rows_per_set=8)  # doctest: +SKIP
>>> Trainer(model=model, args=args, processing_class=processor, callbacks=[callback]).train()        # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from laya_robustness.api import GateResult, judge_run, option_texts
from laya_robustness.run.errors import UsageError
from laya_robustness.run.gate_run import GateRun
from laya_robustness.run.options import parse_settings
from laya_robustness.summary import headlines

logger = logging.getLogger(__name__)
#: The events the callback gates at.
EVERY = ("evaluate", "save")
PREFIX = "robustness"


def logged_metrics(result: GateResult) -> dict[str, float]:
    """What one evaluation logs: each headline number as ``robustness/<family>/<dataset>/<metric>``, and
    ``robustness/failed_checks``."""
    out = {f"{PREFIX}/{family}/{dataset}/{metric}": value
           for (family, dataset, metric), (value, _) in headlines(result.summary).items()}
    out[f"{PREFIX}/failed_checks"] = float(len(result.failures))
    return out


class RobustnessCallback(TrainerCallback):
    """Gate the model at each evaluation (``every="evaluate"``) or save (``every="save"``); see the module doc.

    ``data`` (required: your validation rows), ``families``, ``rows_per_set``, ``seed``, ``thresholds`` and any
    other option (as ``run_gate`` takes them, e.g. ``batch_size=8``) are checked now: a bad one raises
    ``UsageError`` naming it. ``report_dir``: where each evaluation's reports go (``checkpoint-<step>/`` in it);
    ``invariance``: also run the invariance conditions (off: they test the scorer's numerics, not what training
    changes); ``processor``: the model's processor when the Trainer's ``processing_class`` is not it; ``trainer``:
    the Trainer to log through (found by itself when left out: the Trainer that calls the callback).
    """

    def __init__(self, data: str | Path, *, families=None, rows_per_set: int | None = None, seed: int | None = None,
                 thresholds: str | Path | None = None, report_dir: str | Path = "robustness", every: str = "evaluate",
                 stop_on_fail: bool = False, invariance: bool = False, processor: Any = None, trainer: Any = None,
                 root: str | Path | None = None, **options: Any):
        if every not in EVERY:
            raise UsageError(f"every: {every!r} is not one of {', '.join(EVERY)}")
        self.root = Path(root) if root is not None else Path.cwd()
        given = {"data": data, "families": families, "rows_per_set": rows_per_set, "seed": seed,
                 "thresholds": thresholds, "limitations": "none", **options, "dual_model": "none",
                 "report_dir": report_dir}
        raw = option_texts({k: v for k, v in given.items() if v is not None})
        try:
            self.settings = parse_settings(raw, root=self.root, model_given=False)
        except UsageError as exc:
            raise exc.for_arguments() from None
        self.every, self.stop_on_fail, self.invariance = every, stop_on_fail, invariance
        self.processor, self.trainer = processor, trainer
        self._inputs = None  # the rows, read at the first evaluation
        self._variants: dict = {}  # the rows each family scores, built at the first evaluation
        self.results: dict[int, GateResult] = {}  # global step -> what the gate found there

    # -- events ------------------------------------------------------------------------------------------

    def on_evaluate(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every == "evaluate":
            self._gate(args, state, control, model, processing_class)

    def on_save(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every == "save":
            self._gate(args, state, control, model, processing_class)

    # -- the work ---------------------------------------------------------------------------------------

    def _gate(self, args, state, control, model, processing_class) -> None:
        failed: list[str] = []
        if state.is_world_process_zero:
            result = self.gate(model, self.processor or processing_class, state.global_step)
            self._log(state, logged_metrics(result))
            failed = [f"{f.family}/{f.dataset} {f.check}" for f in result.failures]
            if failed:
                logger.warning("robustness gate at step %d: %d check(s) failed: %s", state.global_step, len(failed),
                               "; ".join(failed))
        if self.stop_on_fail and _agreed(bool(failed)):
            control.should_training_stop = True
            if failed:
                logger.warning("robustness gate: training stopped at step %d (stop_on_fail)", state.global_step)

    def gate(self, model, processor, step: int) -> GateResult:
        """The gate's result on ``model`` (with ``processor``) as it stands, its reports in ``checkpoint-<step>/``."""
        if processor is None or not hasattr(processor, "image_processor"):
            raise UsageError("processor: the callback needs the model's processor (an image processor with its "
                             "tokenizer): pass the Trainer processing_class=<the processor>, or processor= here")
        device = str(next(model.parameters()).device)
        settings = dataclasses.replace(self.settings, report_dir=self.settings.report_dir / f"checkpoint-{step}",
                                       device=device, model_name=getattr(model, "name_or_path", "") or "in-memory")
        run = GateRun(settings, root=self.root, model_object=model, processor=processor, inputs=self._inputs,
                      variants=self._variants)
        self._inputs = run.inputs
        try:
            result = judge_run(run, self.invariance, write=True)
        finally:
            run.close()
        self.results[step] = result
        return result

    def _log(self, state, metrics: dict[str, float]) -> None:
        """Log through the Trainer (its ``log``: the history and every ``report_to`` integration), or into the
        state's history when no Trainer is found."""
        trainer = self.trainer or _calling_trainer(self)
        if trainer is not None:
            trainer.log(dict(metrics))
        else:
            state.log_history.append({**metrics, "step": state.global_step})


def _calling_trainer(callback) -> Any:
    """The ``transformers.Trainer`` up the call stack whose callbacks hold ``callback`` (None when none is)."""
    from transformers import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer) and callback in candidate.callback_handler.callbacks:
            return candidate
        frame = frame.f_back
    return None


def _agreed(stop: bool) -> bool:
    """The main process's stop decision, on every rank (a broadcast under ``torch.distributed``)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return stop
    decision = [stop]
    dist.broadcast_object_list(decision, src=0)
    return bool(decision[0])
