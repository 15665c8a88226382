"""The gate while a model trains: ``RobustnessCallback``, a ``transformers.TrainerCallback`` that gates the
trainer's model in memory at each evaluation (or each save) and logs the headline numbers through the Trainer's
own logging, so every ``report_to`` integration (TensorBoard, Weights & Biases, MLflow, ...) receives them.

At each event it runs ``run_gate``'s checks (``api.judge_run``) on the model as it stands (eval mode and
``torch.no_grad`` while it is scored, its mode restored, on its own device) over the rows of ``data``; the rows
are read and their variants built once, at the first evaluation, and reused at every later one. It logs
``robustness/<family>/<dataset>/<metric>`` for each headline number (accuracy, delta and flip rate; each extension
family's own, such as ASR) and ``robustness/failed_checks``, writes the evaluation's reports to
``<report_dir>/checkpoint-<global step>/`` (the Trainer's own naming), and with ``stop_on_fail`` stops training
when a check fails, naming it (or when a failure is confirmed at the next evaluation, or only on a regression
against a baseline: ``stopping``). Under distributed training (a ``torch.distributed`` world of more than one rank)
every rank gates: each scores its share of the evaluation's chunks (``run.executors.distributed``; an FSDP2 or
DeepSpeed ZeRO-3 model made whole while it is scored, DeepSpeed's forward hooks set aside, ``scoring.sharded``), every
rank gets every record, and the main process alone writes and logs; its stop decision is broadcast so every rank
stops together. Where not every rank holds the callback (told through the process group's store at
``on_train_begin``, read at the first evaluation before any collective: ``run.executors.roll_call``), the lowest rank
that holds it gates alone, as one process, a model whole there, and a sharded model is not gated (logged and noted).
The ranks' callbacks answer that roll call in the order they began training, whatever their ``report_dir``: ranks
given different folders gate together, the writing rank's folder gets the reports, and it warns naming the others.

It never kills the training it watches: its inputs are checked before the first step (the rows and limits and the
report folder when it is made; the processor, whether it belongs to the model and whether the Trainer will call it
at all, and that its sharding is one the gate can gather, at ``on_train_begin``), each a ``UsageError`` naming the
argument. A SIGTERM while it gates (a launcher ending the job after a rank died) is noted before the rank ends
(``run.executors.launcher``). The Trainer's console printer is given a short kind (``short_console``): an
evaluation's robustness numbers show as one line (``console_line``, ending with the folder of its reports) instead of
the whole dict, and reach every other callback unchanged. A gate that breaks during training (a harness error, or
anything else) is logged, written to that checkpoint's folder as ``incomplete.txt``, logged as
``robustness/harness_errors``, and training goes on, or, with ``stop_on_fail``, stops once the Trainer has done
that step's saving. A run that judged nothing counts as failed. A peft (LoRA) model, or any wrapper that exposes its
base model, is scored with its adapters in place (``scoring.in_memory.unwrapped``).

>>> callback = RobustnessCallback(data="laya_fixtures/rows", families=["option_order"], rows_per_set=8)  # doctest: +SKIP
>>> Trainer(model=model, args=args, processing_class=processor, callbacks=[callback]).train()        # doctest: +SKIP
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from contextvars import ContextVar
from itertools import zip_longest
from pathlib import Path
from typing import Any

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from laya_robustness.api import GateResult, check_processor, given_options, judge_together
from laya_robustness.run.errors import HarnessError, UsageError
from laya_robustness.run.executors.distributed import sharing_world, world
from laya_robustness.run.executors.launcher import Terminated, ended_by_launcher
from laya_robustness.run.executors.registry import DISTRIBUTED
from laya_robustness.run.executors.roll_call import Roll, RollCall
from laya_robustness.run.files import atomic_write
from laya_robustness.run.gate_run import GateRun
from laya_robustness.run.inputs.options import InMemoryModel, parse_settings, settings_for_model
from laya_robustness.run.inputs.run_inputs import RunInputs
from laya_robustness.scoring.sharded import sharded_by, unknown_shards
from laya_robustness.stopping import GATE_BROKE, NOTHING_JUDGED, check_policy, decide, failed_key
from laya_robustness.summary import headlines

logger = logging.getLogger(__name__)
#: The events the callback gates at.
EVERY = ("evaluate", "save")
PREFIX = "robustness"
#: What an evaluation whose gate broke leaves in its checkpoint folder.
INCOMPLETE_NOTE = "incomplete.txt"
#: The Trainer's strategy that calls each event, and the setting a user changes to have it called.
STRATEGY = {"evaluate": "eval_strategy", "save": "save_strategy"}
#: The longest line the callback shows a person for one evaluation (the console line, the failed checks' warning).
CONSOLE_WIDTH = 120
#: Where a rank gates (``RobustnessCallback.where``): its share with every rank (or as the one process), as one
#: process while the ranks without the callback train on, not at all (another rank gates), or not at all and noted.
TOGETHER, ALONE, ASIDE, REFUSED = "together", "alone", "aside", "refused"
#: The roll call the callbacks answer on every rank (``run.executors.roll_call``), whatever their report folder.
ROLL_CALL = "RobustnessCallback"
#: The folder of the evaluation whose numbers are being logged, for the console line (``_ShortConsole``).
_logging_folder: ContextVar[Path | None] = ContextVar("laya_robustness_logging_folder", default=None)


def console_line(step: int, metrics: dict[str, float], width: int = CONSOLE_WIDTH, folder: Path | None = None) -> str:
    """One evaluation's logged ``metrics`` as a person reads them: the failed checks, then the worst cells (lowest
    accuracy, highest flip rate, in turn) while they fit in ``width``, then the ``folder`` of its reports, whole.

    >>> console_line(4, {"robustness/text/a/acc": 0.5, "robustness/text/a/flip": 0.25, "robustness/failed_checks": 1},
    ...              folder=Path("runs/checkpoint-4"))
    'robustness gate, step 4: 1 failed check; worst: text/a/acc 0.500, text/a/flip 0.250; reports in runs/checkpoint-4'
    >>> console_line(2, {"robustness/harness_errors": 1.0}, folder=Path("runs/checkpoint-2"))
    'robustness gate, step 2: did not finish (the log says why, as does runs/checkpoint-2/incomplete.txt)'
    """
    if f"{PREFIX}/harness_errors" in metrics:
        why = "the log says why" if folder is None else f"the log says why, as does {_shown(folder)}/{INCOMPLETE_NOTE}"
        return f"robustness gate, step {step}: did not finish ({why})"
    failed = int(metrics.get(f"{PREFIX}/failed_checks", 0))
    cells = [(k.removeprefix(f"{PREFIX}/"), v) for k, v in metrics.items() if k.count("/") == 3]
    lowest = [f"{k} {v:.3f}" for k, v in sorted((c for c in cells if c[0].endswith("/acc")), key=lambda c: c[1])]
    highest = [f"{k} {v:.3f}" for k, v in sorted((c for c in cells if c[0].endswith("/flip")), key=lambda c: -c[1])]
    worst = [item for pair in zip_longest(lowest, highest) for item in pair if item]
    line = f"robustness gate, step {step}: {failed} failed check{'' if failed == 1 else 's'}"
    for n, item in enumerate(worst):
        longer = line + ("; worst: " if n == 0 else ", ") + item
        if len(longer) > width:
            break
        line = longer
    return line if folder is None else f"{line}; reports in {_shown(folder)}"


def _shown(folder: Path) -> str:
    """``folder`` as a person finds it: relative to the current folder when inside it, else as it is."""
    try:
        return str(Path(folder).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(folder)


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
    ``UsageError`` naming it, as are rows or limits that cannot be read and a ``report_dir`` that cannot be written.
    ``report_dir``: where each evaluation's reports go (``checkpoint-<step>/`` in it; ``robustness`` under the current
    folder by default, the same on every rank; under ``torchrun`` give every rank the same one, such as a folder
    under ``TrainingArguments.output_dir``: only the main process writes, into its own); ``stop_on_fail``: when to stop
    training (``laya_robustness.stopping``: False, True or "failure", "confirmed", "regression"); ``short_console``:
    show an evaluation's numbers on the console as one line (off: the Trainer's printer shows the whole dict);
    ``invariance``: also run the invariance conditions (off: they test the scorer's numerics, not what training
    changes); ``processor``: the model's processor when the Trainer's ``processing_class`` is not it; ``trainer``:
    the Trainer to log through (found by itself when left out: the Trainer that calls the callback).
    """

    def __init__(self, data: str | Path, *, families=None, rows_per_set: int | None = None, seed: int | None = None,
                 thresholds: str | Path | None = None, report_dir: str | Path = "robustness", every: str = "evaluate",
                 stop_on_fail: bool | str = False, invariance: bool = False, processor: Any = None, trainer: Any = None,
                 root: str | Path | None = None, short_console: bool = True, **options: Any):
        if every not in EVERY:
            raise UsageError(f"every: {every!r} is not one of {', '.join(EVERY)}")
        self.root = Path(root) if root is not None else Path.cwd()
        given = {"data": data, "families": families, "rows_per_set": rows_per_set, "seed": seed,
                 "thresholds": thresholds, "limitations": "none", **options, "dual_model": "none",
                 "report_dir": report_dir}
        values = given_options({k: v for k, v in given.items() if v is not None})
        try:
            self.settings = parse_settings(values, root=self.root, model_given=False)
        except UsageError as exc:
            raise exc.for_arguments() from None
        self.every, self.invariance = every, invariance
        self.stop_on_fail = check_policy(stop_on_fail, self.settings.baseline)
        self._failed_before: set[str] = set()  # what failed at the last evaluation (stop_on_fail="confirmed")
        self.processor, self.trainer, self.short_console = processor, trainer, short_console
        self._inputs = _read_inputs(self.settings)  # the rows and limits, read now: their errors are usage errors
        _check_writable(self.settings.report_dir)
        self._variants: dict = {}  # the rows each family scores, built at the first evaluation
        self.results: dict[int, GateResult] = {}  # global step -> what the gate found there
        self.errors: dict[int, str] = {}  # global step -> why the gate did not finish there
        self._roll_call: RollCall | None = None  # this rank said it holds the callback (on_train_begin)
        self._where: str | None = None  # where this rank gates (``where``), decided at the first evaluation
        self._refusal = ""  # why it gates alone, or not at all (``where``)

    def check_trainer(self, args, model, processor) -> None:
        """``UsageError`` naming the argument when the Trainer's setup cannot be gated: no processor (or one that
        is not the model's), or a Trainer that never calls the event the callback gates at."""
        strategy = STRATEGY[self.every]
        value = getattr(getattr(args, strategy, None), "value", getattr(args, strategy, None))
        if value == "no":
            raise UsageError(f"every: {self.every!r} gates at each {self.every}, and the Trainer's {strategy} is 'no', "
                             "so it would gate nothing", hint=f"set TrainingArguments({strategy}='steps', ...) or pass "
                             f"every={'save' if self.every == 'evaluate' else 'evaluate'!r}").for_arguments()
        _require_processor(processor)
        if model is not None:
            check_processor(model, processor)
            _check_sharding(model)

    # -- events ------------------------------------------------------------------------------------------

    def on_init_end(self, args, state, control, **kwargs):
        self._shorten_console()

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.check_trainer(args, model, self.processor or processing_class)
        self._shorten_console()  # a callback added after the Trainer was made
        ranks = sharing_world()
        if ranks is not None:  # said through the store, no collective: a rank without the callback makes none
            self._roll_call = RollCall(ROLL_CALL, *ranks, says=str(self.settings.report_dir.resolve()))
            self._where = None

    def on_evaluate(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every == "evaluate":
            self._gate(args, state, control, model, processing_class)

    def on_save(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every == "save":
            self._gate(args, state, control, model, processing_class)

    # -- the work ---------------------------------------------------------------------------------------

    def _gate(self, args, state, control, model, processing_class) -> None:
        where = self.where(state, model)
        failed: list[str] = []
        if where in (TOGETHER, ALONE):
            failed = self._gate_here(state, model, self.processor or processing_class)
        elif where == REFUSED:
            failed = self._broke(state, UsageError(self._refusal))
        stop = decide(self.stop_on_fail, failed, self._failed_before)
        self._failed_before = set(failed)
        if where != TOGETHER:  # the ranks without the callback would go on training, and wait for this one
            if stop:
                logger.warning("robustness gate: stop_on_fail=%r cannot stop training at step %d: the callback is "
                               "not on every rank (pass callbacks=[callback] on every rank)", self.stop_on_fail,
                               state.global_step)
            return
        if self.stop_on_fail and _agreed(stop):
            control.should_training_stop = True
            if _main():
                logger.warning("robustness gate: training stopped at step %d (stop_on_fail=%r); reports in %s",
                               state.global_step, self.stop_on_fail, _shown(self._folder(state.global_step)))

    def where(self, state, model) -> str:
        """Where this rank gates: ``TOGETHER`` (every rank its share, or one process), ``ALONE`` (this rank as one
        process: the others do not hold the callback and the model is whole here), ``REFUSED`` (the model is
        sharded and not every rank holds the callback: logged, training goes on) or ``ASIDE`` (another process
        gates). Decided at the first evaluation from the roll call (``run.executors.roll_call``), before any
        collective."""
        if world() is None:
            return TOGETHER if state.is_world_process_zero else ASIDE
        if self._roll_call is None:  # never told training began (a loop calling the events itself): every rank
            return TOGETHER
        if self._where is None:
            roll = self._roll_call.read(wait=state.global_step == 0)
            self._where, self._refusal = _where(roll, self._roll_call.rank, model)
            if self._where in (ALONE, REFUSED):
                logger.warning("robustness gate: %s", self._refusal)
            if self._where != ASIDE and self._writes():
                differ = _folders_differ(self._roll_call.said(roll.holders), self._roll_call.rank,
                                         self.settings.report_dir)
                if differ:
                    logger.warning("robustness gate: %s", differ)
        return self._where

    def _gate_here(self, state, model, processor) -> list[str]:
        """Gate the model on this process: what failed (``stopping.failed_key`` of each failed check,
        ``NOTHING_JUDGED``, or ``GATE_BROKE``: logged, noted in the checkpoint's folder; training goes on)."""
        step = state.global_step
        if not self._writes():  # a rank scoring its share: the main process says what was found
            try:
                self.gate(model, processor, step)
            except Exception as exc:  # noqa: BLE001  (the main process names it, and training goes on)
                logger.debug("robustness gate at step %d, this rank: %s", step, exc)
            return []
        with ended_by_launcher(step) as hold:  # a SIGTERM (a rank died) noted before this rank ends
            try:
                result = self.gate(model, processor, step)
            except (Exception, Terminated) as exc:  # noqa: BLE001  (the gate never kills the training it watches)
                hold()
                return self._broke(state, exc)
            hold()
        self._log(state, logged_metrics(result))
        failed = [failed_key(f.family, f.dataset, f.check) for f in result.failures]
        if failed:
            logger.warning("%s", _failed_line(step, failed, self._folder(step)))
        if result.nothing_judged:
            logger.warning("robustness gate at step %d: %s", step, result.nothing_judged)
        return failed + [NOTHING_JUDGED] * bool(result.nothing_judged)

    def _broke(self, state, exc: BaseException) -> list[str]:
        """An evaluation whose gate did not finish (``exc``: why): logged, noted in ``checkpoint-<step>/``, logged as
        ``robustness/harness_errors`` and kept in ``errors``; training goes on."""
        step = state.global_step
        self.errors[step] = f"{type(exc).__name__}: {exc}"
        logger.error("robustness gate at step %d did not finish (training goes on): %s", step, self.errors[step],
                     exc_info=not isinstance(exc, (HarnessError, UsageError, Terminated)))
        self._note_incomplete(step, self.errors[step])
        self._log(state, {f"{PREFIX}/harness_errors": 1.0})
        return [GATE_BROKE]

    def _note_incomplete(self, step: int, why: str) -> None:
        """``checkpoint-<step>/incomplete.txt``: why this evaluation's gate did not finish (a failure to write it is
        logged: the training goes on)."""
        folder = self._folder(step)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(folder / INCOMPLETE_NOTE, f"the robustness gate at step {step} did not finish: {why}\n")
        except OSError as exc:
            logger.error("robustness gate: cannot write %s: %s", folder / INCOMPLETE_NOTE, exc)

    def gate(self, model, processor, step: int) -> GateResult:
        """The gate's result on ``model`` (with ``processor``) as it stands, its reports in ``checkpoint-<step>/``.
        Under ``torch.distributed`` every rank calls it together: each scores its share, and only the main process
        writes (the others' runs keep their journal in a folder of their own, removed after)."""
        _require_processor(processor)
        _check_sharding(model)
        alone = self._where == ALONE
        ranks, main = (None, True) if alone else (sharing_world(), _main())
        scratch = None if main else Path(tempfile.mkdtemp(prefix="laya-rank-"))
        in_memory = InMemoryModel(model, processor)
        settings = settings_for_model(
            self.settings, in_memory, root=self.root, report_dir=scratch or self._folder(step),
            device=str(next(model.parameters()).device),
            executor=DISTRIBUTED if ranks is not None else self.settings.executor)
        run = GateRun(settings, root=self.root, inputs=self._inputs, variants=self._variants)
        self._inputs = run.inputs
        try:
            result = judge_together(run, self.invariance, main, model, ranks is not None)
        finally:
            run.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        self.results[step] = result
        return result

    def _folder(self, step: int) -> Path:
        """The folder of the reports of the evaluation at ``step``."""
        return self.settings.report_dir / f"checkpoint-{step}"

    def _writes(self) -> bool:
        """Whether this process writes and logs the gate's results (the main process, or the one gating alone)."""
        return self._where == ALONE or _main()

    def _shorten_console(self) -> None:
        if self.short_console:
            trainer = self.trainer or _calling_trainer(self)
            if trainer is not None:
                short_console(trainer)

    def _log(self, state, metrics: dict[str, float]) -> None:
        """Log through the Trainer (its ``log``: the history and every ``report_to`` integration), or into the
        state's history when no Trainer is found."""
        trainer = self.trainer or _calling_trainer(self)
        if trainer is not None:
            token = _logging_folder.set(self._folder(state.global_step))  # the console line names it
            try:
                trainer.log(dict(metrics))
            finally:
                _logging_folder.reset(token)
        else:
            state.log_history.append({**metrics, "step": state.global_step})


def _failed_line(step: int, failed: list[str], folder: Path) -> str:
    """The warning of an evaluation whose checks failed: the first ones named while the line stays short, the rest
    counted, then the summary.md in ``folder`` (the evaluation's reports) that names them all."""
    count = f"{len(failed)} failed check{'' if len(failed) == 1 else 's'}"  # summary.md's own count (``cells``)
    line, shown = f"robustness gate at step {step}: {count}: {failed[0]}", 1
    while shown < len(failed) and len(line) + len(failed[shown]) + 2 <= CONSOLE_WIDTH:
        line, shown = f"{line}; {failed[shown]}", shown + 1
    summary = _shown(folder / "summary.md")
    return line + (f"; {len(failed) - shown} more in {summary}" if shown < len(failed) else f"; see {summary}")


class _ShortConsole:
    """A Trainer console printer that shows logs holding robustness numbers as ``console_line`` (what else they hold
    as its base class prints it); the logs themselves, which every callback shares, are left unchanged."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        ours = {k: v for k, v in (logs or {}).items() if k.startswith(f"{PREFIX}/")}
        if not ours:
            return super().on_log(args, state, control, logs=logs, **kwargs)
        rest = {k: v for k, v in logs.items() if k not in ours}
        if set(rest) - {"epoch", "num_input_tokens_seen", "total_flos"}:
            super().on_log(args, state, control, logs=rest, **kwargs)
        self.show(state, console_line(state.global_step, ours, folder=_logging_folder.get()))


class ShortProgressCallback(_ShortConsole, ProgressCallback):
    """``transformers.ProgressCallback`` with an evaluation's robustness numbers on one line."""

    def show(self, state, line: str) -> None:
        if state.is_world_process_zero and self.training_bar is not None:
            self.training_bar.write(line)


class ShortPrinterCallback(_ShortConsole, PrinterCallback):
    """``transformers.PrinterCallback`` with an evaluation's robustness numbers on one line."""

    def show(self, state, line: str) -> None:
        if state.is_local_process_zero:
            print(line)


#: The Trainer's console printers and the short kind of each.
SHORT_CONSOLES = {ProgressCallback: ShortProgressCallback, PrinterCallback: ShortPrinterCallback}


def short_console(trainer) -> None:
    """Put the short kind of ``trainer``'s console printer (exactly a ``ProgressCallback`` or ``PrinterCallback``: a
    subclass of the user's is left alone) in its place in the callback list, its state carried over."""
    callbacks = trainer.callback_handler.callbacks
    for i, callback in enumerate(callbacks):
        short = SHORT_CONSOLES.get(type(callback))
        if short is not None:
            replacement = short()
            vars(replacement).update(vars(callback))
            callbacks[i] = replacement  # in place: the Trainer may be going through the list right now


def _require_processor(processor) -> None:
    if processor is None or not hasattr(processor, "image_processor"):
        raise UsageError("processor: the callback needs the model's processor (an image processor with its "
                         "tokenizer): pass the Trainer processing_class=<the processor>, or processor= here")


def _read_inputs(settings) -> RunInputs:
    """The callback's rows and limits, read now (each evaluation reuses them): ``UsageError`` naming the argument."""
    inputs = RunInputs(settings, False)
    try:
        inputs.validate()
    except UsageError as exc:
        raise exc.for_arguments() from None
    return inputs


def _check_writable(folder: Path) -> None:
    """``UsageError`` naming ``report_dir`` when a file cannot be made in ``folder`` (made when missing)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".laya-write-check-"):
            pass
    except OSError as exc:
        raise UsageError(f"report_dir: cannot write in {folder}: {exc.strerror or exc}",
                         hint="pass report_dir=<a folder this process can write>").for_arguments() from None


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


def _main() -> bool:
    """Whether this process is the main one (rank 0 of a ``torch.distributed`` world, or no world)."""
    ranks = world()
    return ranks is None or ranks[0] == 0


#: What to train with instead of a sharding the gate cannot make whole.
SHARDING_HINT = ("shard it with FSDP2's fully_shard (the Trainer: fsdp_config={'fsdp_version': 2}) or DeepSpeed ZeRO "
                 "(stage 1, 2 or 3: TrainingArguments(deepspeed=...)), or use DDP")


def _check_sharding(model) -> None:
    """``UsageError`` naming ``model`` for a model the gate cannot make whole while it scores (FSDP1, or shards it
    does not know)."""
    sharding = sharded_by(model)
    if sharding == "fsdp1":
        raise UsageError("model: it is wrapped in FSDP1's FullyShardedDataParallel, whose units all-gather inside "
                         "each forward, so the ranks cannot score different rows", hint=SHARDING_HINT).for_arguments()
    if sharding == "unknown":
        names = unknown_shards(model)
        raise UsageError(f"model: {len(names)} of its parameters are not whole on this rank and neither FSDP2 nor "
                         f"DeepSpeed ZeRO-3 holds them ({names[0]}, ...: tensor parallel, or a sharding the gate does "
                         "not know), so it cannot gather them and the ranks cannot score different rows",
                         hint=SHARDING_HINT).for_arguments()


def _where(roll: Roll, rank: int, model) -> tuple[str, str]:
    """Where ``rank`` gates given the ``roll`` of the ranks holding the callback, and why when not together: a whole
    model is gated by the lowest rank that holds it, alone; a sharded one is not gated (only every rank together
    can gather it)."""
    if roll.every_rank:
        return TOGETHER, ""
    held = f"the callback is on rank{'s' * (len(roll.holders) > 1)} {', '.join(map(str, roll.holders))} of " \
           f"{roll.size} only (pass callbacks=[callback] on every rank: only rank 0 writes and logs)"
    if roll.unknown:
        held = "the process group's store cannot say which ranks hold the callback"
    sharding = sharded_by(model)
    if sharding is None:
        why = f"{held}, so rank {roll.holders[0]} gates alone, as one process (the model is whole there)"
        return (ALONE if rank == roll.holders[0] else ASIDE), why
    why = (f"model: it is sharded over the ranks ({sharding}), which only every rank together can gather, and "
           f"{held}: not gated, training goes on")
    return (REFUSED if rank == roll.holders[0] else ASIDE), why


def _folders_differ(said: dict[int, str], rank: int, mine: Path) -> str:
    """What to warn when the ranks gating with ``rank`` (which writes) said other report folders than ``mine`` with
    their roll call (``said``: rank -> folder), or '' when they agree."""
    others = {r: folder for r, folder in sorted(said.items()) if folder != str(mine.resolve())}
    if not others:
        return ""
    named = "; ".join(f"rank {r}: {folder}" for r, folder in others.items())
    return (f"report_dir: the ranks were given different folders ({named}): rank {rank} writes every evaluation's "
            f"reports to {mine}, and the others' stay empty (give every rank the same report_dir: a fixed path, or "
            "one under TrainingArguments.output_dir, not tempfile.mkdtemp() on each rank)")


def _agreed(stop: bool) -> bool:
    """The main process's stop decision, on every rank (a broadcast under ``torch.distributed``)."""
    import torch.distributed as dist

    if sharing_world() is None:
        return stop
    decision = [stop]
    dist.broadcast_object_list(decision, src=0)
    return bool(decision[0])
