"""The gate's options, pytest-free: their declarations (flag, default, help, parser), their parsing into a
``Settings`` record and its validation. The pytest plugin registers them as command-line and ini options, and
``run_gate`` takes them as arguments; either way a bad value raises ``UsageError`` naming it, before any model
is loaded or any row is read.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from laya_robustness.embedded import (
    EMBEDDED_CAPTIONS,
    EMBEDDED_DATA,
    EMBEDDED_DUAL_MODEL,
    EMBEDDED_LIMITATIONS,
    EMBEDDED_MODEL,
)
from laya_robustness.families import default_families, family_names
from laya_robustness.loaders.settings import (
    data_map_of,
    parse_allow_outside_data,
    parse_data_map,
    parse_max_image_pixels,
)
from laya_robustness.run.errors import UsageError
from laya_robustness.run.executors.ray_cluster import INSTALL_HINT, parse_ray_address
from laya_robustness.run.executors.registry import executor_entry, executor_names
from laya_robustness.run.inputs.resolution import Resolution, resolve
from laya_robustness.scoring.factory import SERVED_SCORER, scorer_names
from laya_robustness.scoring.served import endpoint_parts

PRIMITIVE_TEMPERATURES = ("choice", "noul", "score")
SCORING_PATHS = ("batch", "predict")
PRECISIONS = ("auto", "fp32", "bf16")
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
_PLUGIN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ``--model`` when a served model is gated and the option is not given: the endpoint's only model.
AUTO_MODEL = "auto"


def _int(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        return integer_at_least(value, low)

    parse.low = low  # a Python int is checked against the same bound (``Option.take``)
    return parse


def integer_at_least(value: object, low: int) -> int:
    """``value`` if it is an int (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    if value < low:
        raise ValueError(f"{value} is below {low}")
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def parse_executor(text: str) -> str:
    """A registered executor's name (``run.executors.registry``)."""
    return _choice(executor_names())(text)


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("empty")
    return text


def parse_switch(text: str) -> bool:
    """``yes`` / ``no`` (also true/false, 1/0, on/off)."""
    value = text.strip().lower()
    if value in ("yes", "true", "1", "on"):
        return True
    if value in ("no", "false", "0", "off"):
        return False
    raise ValueError(f"{text!r} is not yes or no")


def parse_device(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:<n>`` or ``mps``."""
    if not _DEVICE.match(text):
        raise ValueError(f"{text!r} is not cpu, cuda, cuda:<n> or mps")
    return text


def parse_actors(text: str) -> int | None:
    """``auto`` (None: one per GPU of the cluster for a CUDA device, else 2) or a number of actors >= 1."""
    return None if text == "auto" else _int(1)(text)


def parse_scorer(text: str) -> str:
    """``hf``, ``openai`` (a model behind an OpenAI-compatible server), a plug-in factory ``module:function`` or the
    name of a ``laya_robustness.scorers`` entry point."""
    if text not in scorer_names() and not _PLUGIN.match(text):
        raise ValueError(f"{text!r} is neither 'hf', '{SERVED_SCORER}' nor 'module:function'")
    return text


def parse_endpoint(text: str) -> str | None:
    """``none`` or an http(s)://host[:port]/path URL without credentials (``scoring.served.endpoint_parts``)."""
    if text == "none":
        return None
    endpoint_parts(text)
    return text.rstrip("/")


def parse_env_name(text: str) -> str:
    """The name of an environment variable (the value is never read from the command line)."""
    if not _ENV_NAME.match(text):
        raise ValueError(f"{text!r} is not the name of an environment variable")
    return text


def parse_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    return seconds_of(value)


def seconds_of(value: object) -> float:
    """``value`` as seconds, if it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{value:g} is not a number of seconds > 0")
    return float(value)


def parse_families(text: str) -> tuple[str, ...]:
    """Comma-separated family names, each known ("did you mean" otherwise), no duplicates."""
    return families_named([f.strip() for f in text.split(",") if f.strip()], text)


def families_named(names, given: object = None) -> tuple[str, ...]:
    """``names`` (family names: a list, a tuple), each known ("did you mean" otherwise), no duplicates;
    ``given``: what the user gave, named in the error about a duplicate."""
    import difflib

    names = tuple(names)
    if not names:
        raise ValueError("no family given")
    known = family_names()
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"{name!r} is not a family name")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"unknown family {name!r}{hint} (known: {', '.join(known)})")
    if len(set(names)) != len(names):
        raise ValueError(f"a family is named twice in {given if given is not None else list(names)!r}")
    return names


def parse_temperatures(text: str) -> dict[str, float]:
    """``"choice=2.2,noul=2.13"`` -> ``{"choice": 2.2, "noul": 2.13, "score": 1.0}``; each finite and > 0."""
    given: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if name not in PRIMITIVE_TEMPERATURES:
            raise ValueError(f"unknown primitive {name!r} (known: {', '.join(PRIMITIVE_TEMPERATURES)})")
        try:
            given[name] = float(value) if sep else None
        except ValueError:
            given[name] = None
        if given[name] is None:
            raise ValueError(f"{part!r} is not primitive=number")
    return temperatures_of(given)


def temperatures_of(given: Mapping[str, float]) -> dict[str, float]:
    """Every primitive's temperature: ``given``'s (primitive -> a finite number > 0), 1.0 for the others."""
    out = dict.fromkeys(PRIMITIVE_TEMPERATURES, 1.0)
    for name, number in given.items():
        if name not in out:
            raise ValueError(f"unknown primitive {name!r} (known: {', '.join(PRIMITIVE_TEMPERATURES)})")
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"the temperature of {name} is not a number: {number!r}")
        if not (math.isfinite(number) and number > 0):
            raise ValueError(f"the temperature of {name} must be a finite number > 0, got {number:g}")
        out[name] = float(number)
    return out


def _switch_of(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not yes or no (True or False)")


def _sequence_of_families(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{value!r} is not a list of family names")
    return families_named(value, value)


def _mapping(check: Callable[[Mapping], Any]) -> Callable[[object], Any]:
    def take(value: object):
        if not isinstance(value, Mapping):
            raise ValueError(f"{value!r} is not a mapping")
        return check(value)

    return take


#: How each option parser's Python value is checked (``Option.take``): a typed value is never rendered to text.
TYPED_VALUES: dict[Callable, Callable[[object], Any]] = {
    parse_switch: _switch_of,
    parse_allow_outside_data: _switch_of,
    parse_seconds: seconds_of,
    parse_actors: lambda value: integer_at_least(value, 1),
    parse_max_image_pixels: lambda value: integer_at_least(value, 1),
    parse_families: _sequence_of_families,
    parse_temperatures: _mapping(temperatures_of),
    parse_data_map: _mapping(lambda value: data_map_of(value.items())),
}


@dataclass(frozen=True, eq=False)
class InMemoryModel:
    """A transformers model loaded in memory with its processor: a source of the model like a directory or a hub
    id (``run_gate(model)``, the Trainer callback), scored as it stands."""

    model: Any
    processor: Any

    @property
    def name(self) -> str:
        """The name a run records it under: the model's ``name_or_path``, else ``in-memory``."""
        return getattr(self.model, "name_or_path", "") or "in-memory"


@dataclass(frozen=True)
class Option:
    flag: str
    default: str
    help: str
    parse: Callable[[str], Any] = _text
    switch: bool = False  # given alone on the command line (``--resume``); ini: yes / no
    example: str = ""  # a value to type when one is wrong (default: the default)
    none: str = "none"  # what a Python None stands for
    objects: tuple[type, ...] = ()  # Python objects taken as they are (an in-memory model for --model)

    @property
    def dest(self) -> str:
        return "laya_" + self.flag.lstrip("-").replace("-", "_")

    @property
    def field(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def typed(self) -> str:
        """What to type for this option: ``--seed 0``, or the switch alone."""
        return self.flag if self.switch else f"{self.flag} {self.example or self.default}"

    def take(self, value: Any) -> Any:
        """The option's value from what was given: its text (the command line, an ini file), parsed; or a Python
        value (``run_gate``'s and the callback's arguments), checked as it is (``TYPED_VALUES``; a path as its
        ``os.fspath``) and never rendered to text to be parsed again. None stands for the option's ``none``
        (``auto`` for --journal). A bad value raises ValueError saying why."""
        if isinstance(value, str):
            return self.parse(value)
        if value is None:
            return self.parse(self.none)
        if self.objects and isinstance(value, self.objects):
            return value
        low = getattr(self.parse, "low", None)
        if low is not None:
            return integer_at_least(value, low)
        if self.parse in TYPED_VALUES:
            return TYPED_VALUES[self.parse](value)
        if isinstance(value, os.PathLike):
            return self.parse(os.fspath(value))
        raise ValueError(f"{value!r} is not text (a {type(value).__name__})")


OPTIONS = (
    Option("--model", EMBEDDED_MODEL, "hub id or local directory of the model to gate",
           example="HuggingFaceTB/SmolVLM-256M-Instruct", objects=(InMemoryModel,)),
    Option("--data", EMBEDDED_DATA, "JSONL manifest, VLMEvalKit TSV, parquet file, datasets.save_to_disk directory, "
           "or a directory of them", example="path/to/rows.jsonl"),
    Option("--rows-per-set", "0", "source rows sampled per dataset with the seed (0: every row)", _int(0)),
    Option("--seed", "0", "seed of row sampling, variants and the bootstrap", _int(0)),
    Option("--families", ",".join(default_families()), "comma-separated families to score", parse_families,
           example="option_order,image"),
    Option("--batch-size", "16", "rows per forward on the batch path", _int(1)),
    Option("--device", "cpu", "device of the tests not marked gpu (gpu-marked tests use cuda)", parse_device),
    Option("--scoring-path", "batch", "how family rows are scored: batch (many rows per forward) or predict "
           "(fp32, one call per image, prefix cache)", _choice(SCORING_PATHS)),
    Option("--precision", "auto", "batch-path precision: auto (bf16 autocast on CUDA, fp32 on CPU), fp32, bf16",
           _choice(PRECISIONS)),
    Option("--thresholds", "thresholds.toml", "the gate's limits file (release limits for any data)"),
    Option("--limitations", "auto", "overlay of per-dataset overrides and known limitations: a file, none, or auto "
           f"({EMBEDDED_LIMITATIONS} when the embedded rows and model are gated)"),
    Option("--report-dir", "reports", "where summary.json and predictions.jsonl.gz are written"),
    Option("--report-dir-wait", "0", "seconds to wait for another run that holds --report-dir to end before stopping "
           "with exit 4 (0: stop at once)", _int(0)),
    Option("--temperatures", "choice=1.0,noul=1.0,score=1.0", "per-primitive temperatures for probabilities and ECE",
           parse_temperatures),
    Option("--ece-floor-sims", "0", "ECE noise-floor redraws added to summary.json's floor block (0: none)", _int(0)),
    Option("--invariance-rows", "8", "source rows per dataset scored under each invariance condition", _int(1)),
    Option("--scorer", "hf", f"hf (AutoModelForImageTextToText), {SERVED_SCORER} (a model behind an OpenAI-compatible "
           "chat endpoint: see --endpoint) or a plug-in factory 'module:function'", parse_scorer),
    Option("--endpoint", "none", f"--scorer {SERVED_SCORER}: the server's OpenAI-compatible base URL, e.g. "
           "http://127.0.0.1:8000/v1 (--model: its model id; may be left out when /v1/models lists one)",
           parse_endpoint),
    Option("--api-key-env", "OPENAI_API_KEY", "the environment variable holding the served model's API key (sent as "
           "a bearer token; never written anywhere)", parse_env_name),
    Option("--concurrency", "8", "requests in flight at once to a served model", _int(1)),
    Option("--request-timeout", "60", "seconds a request to a served model may take before it is retried",
           parse_seconds),
    Option("--attn-implementation", "eager", "attention kernel passed to from_pretrained (eager is batch-invariant)"),
    Option("--feature-cache-mb", "1024", "MiB of vision features the hf scorer keeps on the device, so each image is "
           "encoded once for every family (a 13-tile SmolVLM-256M photo: 1.9 MiB); raise it for many images", _int(0)),
    Option("--pixel-cache-mb", "1024", "MiB of preprocessed pixels the hf scorer keeps (a 13-tile SmolVLM photo: "
           "65 MiB); a batch-path call whose pixels outgrow half of it is scored in windows", _int(0)),
    Option("--prefix-cache-mb", "1024", "MiB of prompt-prefix keys and values the hf scorer keeps on the device, so an "
           "image's prefix runs once for all its rows and families (a 17-tile SmolVLM-256M photo: 50 MiB in fp32); "
           "0 turns prefix sharing off", _int(0)),
    Option("--image-cache-mb", "64", "MiB of decoded images the run keeps between uses (source images, and a "
           "family's variant images until their chunk is scored: 72 photos of 640 x 480); what does not fit is "
           "decoded or rebuilt again when a chunk of rows needs it, so the decoded images held do not grow with "
           "the rows", _int(0)),
    Option("--keep-freed-memory", "yes", "yes: glibc's malloc keeps freed memory for reuse instead of unmapping "
           "large blocks, which CPU forwards then fault in anew (about 2x on photo-sized inputs), and gives it back "
           "as images are let go (half --image-cache-mb of them) and at each cell's end (a Ray actor: after every call); "
           "no: leave malloc as it is", parse_switch),
    Option("--captions", EMBEDDED_CAPTIONS, "caption rows the dual-encoder (lgip) families probe: a COCO-captions "
           "file, a caption JSONL file or a directory of them"),
    Option("--dual-model", "auto", "dual encoder (CLIP / SigLIP) the lgip families probe: a hub id or directory, none, "
           f"or auto (--model when it is a dual encoder; {EMBEDDED_DUAL_MODEL} when the embedded model is gated on the "
           "embedded rows, or on other --captions)"),
    Option("--paraphrases", "none", "JSONL of your own caption paraphrases by row id ({row_id, paraphrases}), or none"),
    Option("--rephrasings", "none", "JSONL of your own question rephrasings by row id ({row_id, rephrasings: [...]}) "
           "the rephrase family asks besides its built-in rules (python -m laya_robustness variants rephrase "
           "writes one), or none"),
    Option("--translations", "none", "JSONL of your own question translations by row id ({row_id, translations: "
           "{language: text}}) the language family asks besides its built-in ones (python -m laya_robustness "
           "variants translate writes one), or none"),
    Option("--baseline", "none", "predictions.jsonl.gz of an earlier run (the last release): adds the paired "
           "comparison with it and the regression checks (max_regression, max_flip_regression), or none"),
    Option("--journal", "auto", "folder of the scoring journal --resume reads (auto: <report-dir>/journal, removed "
           "once a run completes; a folder you name is kept, so runs can share it)", none="auto"),
    Option("--resume", "no", "reuse the records a killed or interrupted run journaled under --report-dir (same "
           "rows, model and settings) and score only the rest", parse_switch, switch=True),
    Option("--data-map", "none", "field=column pairs naming the parquet / datasets columns that hold row fields, "
           "e.g. question=prompt,options=choices,label=answer_idx (field= leaves a same-named column unread)",
           parse_data_map),
    Option("--max-image-pixels", "40000000", "largest image accepted, width x height in pixels (e.g. 40000000 or "
           "40M), checked from the header before decoding; the encoded bytes may be 4 per pixel + 1 MiB",
           parse_max_image_pixels),
    Option("--max-image-side", "1024", "longest image side: larger images are scaled down to it when read (bicubic, "
           "aspect kept), as the stability study does; 0 keeps every size", _int(0)),
    Option("--executor", "local", "where rows are scored: local (this process, or each xdist worker), ray (a pool "
           f"of Ray actors, each loading the model once; needs the cluster extra: {INSTALL_HINT}) or distributed "
           "(every rank of an initialised torch.distributed world, each its share: what the training callback uses "
           "under torchrun)",
           parse_executor),
    Option("--ray-address", "local", "the Ray cluster of --executor ray: local (started on this machine for the run), "
           "auto (the cluster this machine belongs to, or RAY_ADDRESS), the head's host:port, or ray://host:port",
           parse_ray_address),
    Option("--ray-actors", "auto", "scoring actors of --executor ray: a number, or auto (one per GPU of the cluster "
           "for a cuda device, else 2)", parse_actors, none="auto"),
    Option("--allow-outside-data", "no", "yes: read image paths that are absolute or lead out of the --data "
           "directory (no: refuse them)", parse_allow_outside_data),
)


def option(flag: str) -> Option:
    """The declaration of one option."""
    return next(o for o in OPTIONS if o.flag == flag)


def by_field(name: str) -> Option:
    """The declaration of the option whose ``Settings`` field (and ``run_gate`` argument) is ``name``."""
    return next(o for o in OPTIONS if o.field == name)


def default_of(flag: str) -> Any:
    """An option's default, parsed as its value would be (``default_of("--batch-size")`` is 16)."""
    opt = option(flag)
    return opt.parse(opt.default)


def bad_value(flag: str, problem: object, instead: str | None = None) -> UsageError:
    """A usage error naming the option, with what to type instead (``instead``, else the option with its example
    or default)."""
    return UsageError(f"{flag}: {problem}", flag, instead or option(flag).typed())


@dataclass(frozen=True)
class Settings:
    """Every option of a gate run, parsed and validated (paths resolved against the rootdir)."""

    model_name: str  # as the user gave it: recorded in meta and the snapshot name
    model: str | None  # the local directory, the hub id, or a served model's id (None: the endpoint's only one)
    data: Path
    rows_per_set: int
    seed: int
    families: tuple[str, ...]
    batch_size: int
    device: str
    scoring_path: str
    precision: str
    thresholds: Path
    limitations: Path | None
    report_dir: Path
    report_dir_wait: int
    temperatures: dict
    ece_floor_sims: int
    invariance_rows: int
    scorer: str
    endpoint: str | None  # --scorer openai: the server's base URL
    api_key_env: str
    concurrency: int
    request_timeout: float
    attn_implementation: str
    feature_cache_mb: int
    pixel_cache_mb: int
    prefix_cache_mb: int
    image_cache_mb: int
    captions: Path
    dual_model: str | None  # "auto" resolved later, when the model's kind is known
    paraphrases: Path | None
    rephrasings: Path | None
    translations: Path | None
    resume: bool
    keep_freed_memory: bool
    baseline: Path | None
    journal: Path | None  # None: <report-dir>/journal
    data_map: dict  # row field -> column of a parquet / datasets table (laya_robustness.loaders.settings)
    max_image_pixels: int
    max_image_side: int
    allow_outside_data: bool
    executor: str
    ray_address: str
    ray_actors: int | None  # None: one per GPU of the cluster for a cuda device, else 2
    # what the run says about its known limitations: measured on other weights (applied as asked, or not applied)
    limitations_note: str | None = None
    # the model, when it is one loaded in memory (``model`` is then None and ``model_name`` its name)
    in_memory: InMemoryModel | None = field(default=None, compare=False, repr=False)
    # which of model, data and captions are the embedded default's (``resolution.embedded_parts``)
    embedded: frozenset = frozenset()

    def is_embedded(self, name: str) -> bool:
        """Whether the setting ``name`` (model, data, captions) is the embedded default's."""
        return name in self.embedded


def check_executor(values: Mapping[str, Any], given: Collection[str], xdist_workers: object) -> None:
    """An option only another executor uses, given (``given``: the flags set on the command line or as arguments;
    set in the ini file, they wait for a run that uses their executor), is a usage error naming it; then the chosen
    executor checks the values and xdist (``registry.ExecutorEntry.check``: --executor ray needs Ray and no
    xdist)."""
    chosen = values["executor"]
    entry = executor_entry(chosen)
    for name in executor_names():
        for flag in executor_entry(name).options:
            if flag in given and flag not in entry.options:
                raise bad_value(flag, f"only --executor {name} uses it (the executor is {chosen})",
                                f"--executor {name} {option(flag).typed()}")
    if entry.check is not None:
        entry.check(values, xdist_workers)


def check_served(values: dict) -> None:
    """The options a served model needs: ``--endpoint`` (a usage error naming it otherwise)."""
    if values["endpoint"] is None:
        raise bad_value("--endpoint", f"--scorer {SERVED_SCORER} needs the server's base URL",
                        f"--scorer {SERVED_SCORER} --endpoint http://127.0.0.1:8000/v1")


def typed_values(given_values: Mapping[str, Any], *, root: Path, model_given: bool = True,
                 given: Collection[str] = (), xdist_workers: object = None) -> dict[str, Any]:
    """Every option's value by field from what was given (``given_values``: flag -> its text, or a Python value:
    ``Option.take``; a flag left out takes its default), checked, its paths joined to ``root`` when relative; pure
    (nothing here reads the disk). A bad value raises UsageError naming the option. ``--model`` may be an
    ``InMemoryModel`` (``values["in_memory"]``, its ``model`` None); ``model_given``: ``--model`` was set (a served
    model left without one is the endpoint's only model: ``model`` None); ``given``: the flags set on the command
    line or as arguments (an executor's own options given to another: ``check_executor``); ``xdist_workers``:
    ``-n``. ``model_name`` is the model as the user gave it."""
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        try:
            values[opt.field] = opt.take(given_values.get(opt.flag, opt.default))
        except ValueError as exc:
            raise bad_value(opt.flag, exc) from None
    check_executor(values, given, xdist_workers)
    model = values["model"]
    values["in_memory"] = model if isinstance(model, InMemoryModel) else None
    if values["in_memory"] is not None:  # scored as it stands, by the hf scorer
        if values["scorer"] != "hf":
            raise bad_value("--scorer", f"{values['scorer']!r}: a model loaded in memory is scored by the hf scorer",
                            "--scorer hf")
        values["model_name"], values["model"] = model.name, None
    elif values["scorer"] == SERVED_SCORER:  # the server's model id, as it is; omitted: the endpoint's only model
        check_served(values)
        values["model_name"] = model if model_given else AUTO_MODEL
        values["model"] = None if values["model_name"] == AUTO_MODEL else values["model_name"]
    else:
        values["model_name"] = model
    join = lambda text: resolved(root, text)  # noqa: E731
    for name in ("data", "captions", "thresholds", "report_dir"):
        values[name] = join(values[name])
    for name in ("rephrasings", "translations", "paraphrases", "baseline"):
        values[name] = None if values[name] == "none" else join(values[name])
    values["journal"] = None if values["journal"] == "auto" else join(values["journal"])
    values["dual_model"] = None if values["dual_model"] == "none" else values["dual_model"]
    return values


def settings_from(values: Mapping[str, Any], resolution: Resolution) -> Settings:
    """The one constructor of ``Settings``: the options' typed values (``typed_values``) with what they name on
    this machine (``resolution.resolve``); pure. A journal inside --data is a usage error naming --journal."""
    if resolution.journal_inside_data:
        raise bad_value("--journal", f"{values['journal']} is inside --data {values['data']}: --resume would read its "
                        "files as rows", "--journal reports/journal")
    return Settings(**{**values, "model": resolution.model, "dual_model": resolution.dual_model,
                       "limitations": resolution.limitations, "limitations_note": resolution.limitations_note,
                       "embedded": resolution.embedded})


def parse_settings(given_values: Mapping[str, Any], *, root: Path, cwd: Path | None = None, model_given: bool = True,
                   given: Collection[str] = (), xdist_workers: object = None) -> Settings:
    """Every option from what was given, as pytest's text, ``run_gate``'s arguments and the Trainer callback give
    them: ``typed_values`` (pure), then ``resolution.resolve`` (the checkpoints, the known limitations and the
    embedded default's parts, on this machine; a relative model directory against ``root``, then ``cwd``), then
    ``settings_from``. A bad value raises UsageError naming the option."""
    values = typed_values(given_values, root=root, model_given=model_given, given=given, xdist_workers=xdist_workers)
    found = resolve(values, root=root, cwd=cwd or Path.cwd(), served=values["scorer"] == SERVED_SCORER,
                    typed=lambda flag: option(flag).typed())
    return settings_from(values, found)


def settings_for_model(settings: Settings, model: InMemoryModel, *, root: Path, **changes: Any) -> Settings:
    """``settings`` for ``model``, a model in memory (the Trainer callback's, at each evaluation), with ``changes``
    (option field -> Python value): every option given again to ``parse_settings`` as the settings hold it, so a
    changed value is checked as ``run_gate``'s arguments are."""
    given = {opt.flag: getattr(settings, opt.field) for opt in OPTIONS if opt.field != "model"}
    given.update({by_field(name).flag: value for name, value in changes.items()})
    given["--model"] = model
    return parse_settings(given, root=root)


def resolved(root: Path, text: str) -> Path:
    """A path resolved against ``root`` when relative."""
    path = Path(text)
    return path if path.is_absolute() else Path(root) / path
