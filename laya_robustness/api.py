"""The gate as a Python call: ``run_gate(...)`` runs every check the pytest gate runs (each family on each dataset,
the invariance conditions, the --baseline comparison) on one device, without pytest, and returns a ``GateResult``.

Its arguments are the options with the same defaults and the same validation (``--rows-per-set`` is
``rows_per_set``); a bad value raises ``UsageError`` naming the argument and what to pass. ``model`` is a hub
id, a directory, or a transformers model loaded in memory (with ``processor``), scored as it stands. No report
is written unless ``report_dir`` is given (``GateResult.write(dir)`` writes them later); a part that breaks
raises ``HarnessError`` once what was scored is journaled (and, with ``report_dir``, reported as incomplete).

>>> result = run_gate(families=["option_order"], rows_per_set=4)           # doctest: +SKIP
>>> result.passed, result.exit_status, [f.message for f in result.failures]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from laya_robustness.families import declared
from laya_robustness.gate.explain import failure_message
from laya_robustness.gate.results import CheckResult
from laya_robustness.gate.verdict import FAIL, XPASS
from laya_robustness.records import ORIG
from laya_robustness.run.errors import EXIT_LIMIT_CROSSED, HarnessError, UsageError
from laya_robustness.run.executors.distributed import end_of_gate
from laya_robustness.run.executors.registry import executor_class
from laya_robustness.run.gate_run import CellCheck, GateRun, Skipped, decided_nothing
from laya_robustness.run.inputs.options import OPTIONS, InMemoryModel, by_field, default_of, parse_settings
from laya_robustness.run.judged import JudgedTally
from laya_robustness.run.outcome import Ending, RunOutcome
from laya_robustness.run.outputs.lock import RunIdentity, claim_or_say_why, release
from laya_robustness.run.scope import Scope
from laya_robustness.run.pipeline.invariance import CONDITION_NAMES, DUAL_CONDITIONS
from laya_robustness.run.pipeline.journal import JOURNAL_DIR
from laya_robustness.scoring.in_memory import device_mismatch, processor_mismatch, unwrapped
from laya_robustness.scoring.sharded import whole_weights

#: ``progress(label, done, total)``: told the rows scored of each cell (``label``: family/dataset (device)).
ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Failure:
    """One check that failed the gate: a limit crossed, or a known limitation that now passes (``xpass``)."""

    family: str
    dataset: str
    check: str
    value: float | None
    limit: float
    interval: tuple[float, float] | None
    message: str
    kind: str = FAIL  # or XPASS


@dataclass
class GateResult:
    """What a gate run found: ``passed`` (``exit_status`` 0) or not (1 a limit was crossed, as the pytest gate
    would exit; 4 or 3 when the run judged nothing), the ``summary`` (what summary.json holds), the ``checks``
    (checks.json), the ``failures``, the ``invariance`` stats (invariance.json, None without any), the ``scope``
    (what the run covered), the checks that did not run with their reasons (``skipped``: test id -> reason), how
    many checks reached a verdict (``judged``) and, for a run that judged none, why (``nothing_judged``: such a run
    never passes; its status is 4 when the selection leaves nothing to judge, 3 when what was scored gave the
    limits nothing to judge). ``outcome`` is the whole ``run.outcome.RunOutcome`` these are read from (every
    device's reports, the records, what was written)."""

    passed: bool
    exit_status: int
    summary: dict
    checks: dict
    failures: list[Failure]
    invariance: dict | None
    scope: Scope | None
    skipped: dict[str, str] = field(default_factory=dict)
    judged: int = 0
    nothing_judged: str | None = None
    outcome: RunOutcome | None = field(default=None, repr=False, compare=False)
    _identity: RunIdentity | None = field(default=None, repr=False, compare=False)
    _wait: float = field(default=0, repr=False, compare=False)

    def write(self, report_dir: str | Path) -> list[Path]:
        """Write the run's report files (summary.json, checks.json, predictions.jsonl.gz, invariance.json,
        report.html, summary.md) in ``report_dir``, all or none, holding its lock as a run does; the paths written.
        Another run holding the folder, or a folder that cannot be written, is a ``UsageError`` naming
        ``report_dir``; a failure while writing (a full disk) a ``HarnessError``."""
        from laya_robustness.report.folder import write_reports

        folder = Path(report_dir)
        try:
            claim_or_say_why(folder, self._identity, wait_s=self._wait,
                             hint="write(<another folder>), or once that run has ended")
        except UsageError as exc:
            raise exc.for_arguments() from None
        try:
            done = write_reports(self.outcome, folder)
        finally:
            release(folder, self._identity)
        if not done.paths:
            raise HarnessError(done.errors[-1])
        return list(done.paths)


def given_options(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``run_gate``'s arguments by their options' flags, their values as given (``Option.take`` checks each as it
    is); an unknown argument is a TypeError naming it."""
    given = {}
    for name, value in arguments.items():
        try:
            opt = by_field(name)
        except StopIteration:
            import difflib

            close = difflib.get_close_matches(name, [o.field for o in OPTIONS], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise TypeError(f"run_gate() got an unexpected argument {name!r}{hint}") from None
        given[opt.flag] = value
    return given


class _Tracker:
    """A progress tracker that tells ``callback`` the rows done of one cell."""

    def __init__(self, callback: ProgressCallback, label: str, total: int):
        self.callback, self.label, self.total, self.done = callback, label, total, 0

    def update(self, n: int) -> None:
        self.done += n
        self.callback(self.label, self.done, self.total)

    def close(self) -> None:
        pass


def _progress(progress: bool | ProgressCallback):
    """The run's progress factory: nothing (False), a tqdm bar per cell on stderr (True), or a callback."""
    if not progress:
        return None
    if callable(progress):
        return lambda device, label, total: _Tracker(progress, f"{label} ({device})", total)
    from tqdm import tqdm

    return lambda device, label, total: tqdm(total=total, desc=f"scoring {label} ({device})", unit="rows")


def run_gate(model: Any = None, *, processor: Any = None, data: str | Path | None = None,
             families: Iterable[str] | str | None = None, seed: int | None = None, rows_per_set: int | None = None,
             thresholds: str | Path | None = None, limitations: str | Path | None = None, device: str | None = None,
             scorer: str | None = None, endpoint: str | None = None, executor: str | None = None,
             batch_size: int | None = None, scoring_path: str | None = None, report_dir: str | Path | None = None,
             resume: bool = False, baseline: str | Path | None = None, invariance: bool = True,
             progress: bool | ProgressCallback = False, root: str | Path | None = None,
             **options: Any) -> GateResult:
    """Run the gate (see the module doc). Every argument left as None takes its option's default (``pytest
    --help`` and docs/options.md list them; any other option is a keyword of its name, e.g.
    ``invariance_rows=4``); relative paths are read against ``root`` (default: the working folder). ``device``
    defaults to an in-memory model's own device; ``invariance=False`` leaves the invariance conditions out;
    ``progress``: True for a tqdm bar per cell, or ``callback(label, done, total)``."""
    in_memory = model is not None and not isinstance(model, (str, Path))
    if processor is not None and not in_memory:
        raise UsageError("processor: only a model loaded in memory takes one (a directory or hub id has its own)",
                         hint="pass model=<a transformers model object> with processor=, or leave processor out")
    if in_memory and processor is None:
        raise UsageError("processor: a model loaded in memory needs its processor (processor=AutoProcessor...)")
    if in_memory:
        check_processor(model, processor)
        if mismatch := device_mismatch(unwrapped(model), device):
            raise UsageError(f"{mismatch[0]}: {mismatch[1]}")
    given = {"model": None if in_memory else model, "data": data, "families": families, "seed": seed,
             "rows_per_set": rows_per_set, "thresholds": thresholds, "limitations": limitations, "device": device,
             "scorer": scorer, "endpoint": endpoint, "executor": executor, "batch_size": batch_size,
             "scoring_path": scoring_path, "baseline": baseline, "resume": resume or None, **options}
    given = {k: v for k, v in given.items() if v is not None}
    if in_memory:  # scored as it stands: no dual encoder goes with it, and no known limitation of a checkpoint
        given["model"] = InMemoryModel(model, processor)
        given.setdefault("device", str(getattr(model, "device", "cpu")))
        given.setdefault("dual_model", "none")
        given.setdefault("limitations", "none")
    root = Path(root) if root is not None else Path.cwd()
    declared = executor_class(executor if executor is not None else default_of("--executor"))
    ranks = declared.world() if declared is not None else None  # the ranks that run it together, if any
    if ranks is not None and ranks[0] != 0:  # a rank scoring its share: rank 0 writes the reports
        report_dir = None
    scratch = None if report_dir is not None else Path(tempfile.mkdtemp(prefix="laya-run-"))
    given["report_dir"] = report_dir if report_dir is not None else scratch
    values = given_options(given)
    try:
        settings = parse_settings(values, root=root, cwd=Path.cwd(), model_given="model" in given, given=list(values))
    except UsageError as exc:
        _remove(scratch)
        raise exc.for_arguments() from None
    run = GateRun(settings, root=root, progress=_progress(progress))
    if in_memory and run.executor.holds_scorers:
        _remove(scratch)
        raise UsageError("executor: a model loaded in memory is scored in this process: executor='local'")
    try:
        result = judge_together(run, invariance, report_dir is not None, model if in_memory else None,
                                ranks is not None)
    except UsageError as exc:
        _remove(scratch)
        raise exc.for_arguments() from None
    except HarnessError as exc:
        kept = None if scratch is None or settings.journal is not None else scratch / JOURNAL_DIR
        if kept is not None and _journaled(kept):  # what was scored stays, to be resumed
            raise HarnessError(f"{exc} (what was scored is journaled in {kept}: run_gate(..., "
                               f"journal={str(kept)!r}, resume=True) scores only the rest)",
                               stops_run=exc.stops_run) from exc
        _remove(scratch)
        raise
    finally:
        run.close()
    _remove(scratch)
    return result


def judge_together(run: GateRun, invariance: bool, write: bool, model: Any, ranks: bool) -> GateResult:
    """``judge_run`` with a model in memory (``model``; None for a checkpoint) whose weights FSDP2 shards made whole
    while it runs (``scoring.sharded``), and with ``ranks`` (``--executor distributed``) the end of every rank's run
    met (``end_of_gate``), however it ends: what ``run_gate`` and the training callback run."""
    error = None
    try:
        with whole_weights(model) if model is not None else contextlib.nullcontext():
            return judge_run(run, invariance, write=write)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if ranks:
            end_of_gate(error)


def _journaled(journal: Path) -> bool:
    """Whether a journal folder holds anything scored (a run that broke before scoring leaves none worth naming)."""
    return journal.is_dir() and any(p.is_file() and p.stat().st_size for p in journal.rglob("*"))


def check_processor(model, processor) -> None:
    """``UsageError`` naming ``model`` when it is no transformers model, or ``processor`` when it does not belong to
    the model in memory (``scoring.in_memory``)."""
    base = unwrapped(model)
    if getattr(base, "config", None) is None or not callable(getattr(base, "parameters", None)):
        raise UsageError(f"model: {type(model).__name__} is neither a transformers model (with its config and "
                         "parameters), a hub id nor a directory", hint="pass model=AutoModelForImageTextToText."
                         "from_pretrained(...), or its hub id or directory").for_arguments()
    if getattr(processor, "tokenizer", None) is None and getattr(processor, "image_processor", None) is None:
        raise UsageError(f"processor: {type(processor).__name__} is no processor (it has neither a tokenizer nor "
                         "an image processor)", hint="pass processor=AutoProcessor.from_pretrained(<the model's "
                         "checkpoint>)").for_arguments()
    why = processor_mismatch(base, processor)
    if why:
        hint = "pass the processor saved with the model: processor=AutoProcessor.from_pretrained(<its checkpoint>)"
        raise UsageError(f"processor: {why}", hint=hint).for_arguments()


def _remove(scratch: Path | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def judge_run(run: GateRun, invariance: bool = True, write: bool = False) -> GateResult:
    """Every check of ``run`` on its device (the invariance conditions with ``invariance``), its reports (written
    in ``--report-dir`` with ``write``) and the result; a ``UsageError`` or ``HarnessError`` as ``run_gate``."""
    device, skipped, failures = run.settings.device, {}, []
    run.validate_inputs()
    if write:
        run.claim_report_dir()
    run.scorers.connect_cluster()
    if run.models.served and (why := run.scorers.endpoint_unreachable()):
        raise HarnessError(why, stops_run=True)
    family_cells = [(family.name, dataset) for family in declared()
                    if family.name == ORIG or family.name in run.settings.families for dataset in run.rows_of(family.name)]
    checks: list[tuple[str, Callable[[], Any]]] = [
        (f"{f}[{d}-{device}]", lambda f=f, d=d: run.check_family(f, d, device)) for f, d in family_cells]
    runnable = set(run.run_cells())  # on Ray, scored as one stream from the first check on, in the checks' order
    run.plan([(f, d, device) for f, d in family_cells if (f, d) in runnable])
    if invariance:
        checks += [(f"invariance[{device}-{c}]", lambda c=c: run.check_invariance(c, device)) for c in CONDITION_NAMES]
        checks += [(f"dual_invariance[{device}-{c}]", lambda c=c: run.check_invariance(c, device, "captions"))
                   for c in DUAL_CONDITIONS]
    if run.settings.baseline is not None:
        checks += [(f"no_regression[{f}-{device}]", lambda f=f: run.check_regression(f, device))
                   for f in [ORIG, *run.settings.families]]
    tally = JudgedTally()
    for name, check in checks:
        try:
            judged = check()
        except Skipped as exc:
            skipped[name] = str(exc)
            tally.asked_for(skipped=str(exc))
            continue
        except HarnessError as exc:
            tally.asked_for()
            if exc.stops_run:
                break
            continue
        failures += _failures(judged)
        inapplicable = decided_nothing(judged)
        tally.asked_for(judged=not inapplicable, not_applicable=inapplicable)
    return _result(run, device, failures, skipped, write, tally)


def _failures(check) -> list[Failure]:
    """The failures of one judged cell, condition or regression, as the pytest gate would fail its test."""
    if isinstance(check, CellCheck):
        verdict = check.verdict
        return [*(_failure(r, FAIL) for r in verdict.failures),
                *(_failure(r, XPASS) for r in (verdict.fixed if verdict.outcome == XPASS else ()))]
    return [_failure(r, FAIL) for r in check.results if not r.passed]


def _failure(result: CheckResult, kind: str) -> Failure:
    return Failure(result.family, result.dataset, result.check, result.value, result.limit, result.interval,
                   failure_message(result, []), kind)


def _result(run: GateRun, device: str, failures: list[Failure], skipped: dict, write: bool,
            tally: JudgedTally) -> GateResult:
    """The run's outcome (``GateRun.finish``), its reports written when asked, as a ``GateResult``; its harness
    errors raised once they are reported. A run that judged nothing is not passed (``GateResult.nothing_judged``
    says why) and its reports say it is incomplete."""
    families = run.settings.families
    narrowed = () if tuple(families) == default_of("--families") else (f"--families {','.join(families)}",)
    nothing = tally.nothing_judged()
    outcome = run.finish(Ending(status=EXIT_LIMIT_CROSSED if failures else 0, narrowed_by=narrowed,
                                nothing_judged=nothing))
    ranks = run.executor.sharing_world()  # the ranks that do not write draw rank 0's plots
    if write:
        from laya_robustness.report.drawn_elsewhere import DrawnElsewhere
        from laya_robustness.report.folder import written_to

        outcome = written_to(outcome, run.settings.report_dir, None if ranks is None else DrawnElsewhere())
    elif ranks is not None and ranks[0] != 0 and not outcome.harness_errors:  # a broken run ends at once, naming why
        from laya_robustness.report.drawn_elsewhere import draw_for_writer

        draw_for_writer(outcome, *ranks)
    errors = outcome.harness_errors
    if errors:
        raise HarnessError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    report = outcome.reports.get(device)
    checks = report.checks if report is not None and report.checks is not None else {"meta": {}, "results": []}
    return GateResult(passed=outcome.exit_status == 0, exit_status=outcome.exit_status,
                      summary=outcome.summaries.get(device, {}), checks=json.loads(json.dumps(checks)),
                      failures=failures, invariance=report.invariance if report is not None else None,
                      scope=outcome.scopes.get(device), skipped=skipped, judged=tally.judged,
                      nothing_judged=nothing and nothing.message, outcome=outcome, _identity=run.run_identity,
                      _wait=run.settings.report_dir_wait)
