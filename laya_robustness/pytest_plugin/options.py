"""The plugin's command-line options: one ``laya-robustness`` group, each also settable in the ini file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from laya_robustness.families import DEFAULT_FAMILIES


@dataclass(frozen=True)
class Option:
    flag: str
    default: str
    help: str

    @property
    def dest(self) -> str:
        return "laya_" + self.flag.lstrip("-").replace("-", "_")


OPTIONS = (
    Option("--model", "laya_fixtures/tiny-smolvlm", "hub id or local directory of the model to gate"),
    Option("--data", "laya_fixtures/rows", "JSONL manifest / VLMEvalKit TSV file, or a directory of them"),
    Option("--rows-per-set", "0", "source rows sampled per dataset with the seed (0: every row)"),
    Option("--seed", "0", "seed of row sampling, variants and the bootstrap"),
    Option("--families", ",".join(DEFAULT_FAMILIES), "comma-separated families to score"),
    Option("--batch-size", "16", "rows per forward on the batch path"),
    Option("--device", "cpu", "device of the tests not marked gpu (gpu-marked tests use cuda)"),
    Option("--scoring-path", "batch", "how family rows are scored: batch (many rows per forward) or predict "
           "(fp32, one call per image, prefix cache)"),
    Option("--precision", "auto", "batch-path precision: auto (bf16 autocast on CUDA, fp32 on CPU), fp32, bf16"),
    Option("--thresholds", "thresholds.toml", "the gate's limits file"),
    Option("--report-dir", "reports", "where summary.json and predictions.jsonl.gz are written"),
    Option("--temperatures", "choice=1.0,noul=1.0,score=1.0", "per-primitive temperatures for probabilities and ECE"),
    Option("--ece-floor-sims", "0", "ECE noise-floor redraws added to summary.json's floor block (0: none)"),
    Option("--invariance-rows", "8", "source rows per dataset scored under each invariance condition"),
    Option("--scorer", "hf", "hf (AutoModelForImageTextToText) or a plug-in factory 'module:function'"),
    Option("--attn-implementation", "eager", "attention kernel passed to from_pretrained (eager is batch-invariant)"),
    Option("--data-map", "none", "field=column pairs naming the parquet / datasets columns that hold row fields, "
           "e.g. question=prompt,options=choices,label=answer_idx (field= leaves a same-named column unread)"),
    Option("--max-image-pixels", "40000000", "largest image accepted, width x height in pixels (e.g. 40000000 or "
           "40M), checked from the header before decoding; the encoded bytes may be 4 per pixel + 1 MiB"),
    Option("--allow-outside-data", "no", "yes: read image paths that are absolute or lead out of the --data "
           "directory (no: refuse them)"),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya-robustness", "robustness gate for vision-language models")
    for opt in OPTIONS:
        group.addoption(opt.flag, dest=opt.dest, default=None,
                        help=f"{opt.help} (default: {opt.default}; ini: {opt.dest})")
        parser.addini(opt.dest, help=opt.help, default=None)


def get(config: pytest.Config, flag: str) -> str:
    """An option's value: the command line, else the ini file, else its default."""
    opt = next(o for o in OPTIONS if o.flag == flag)
    value = config.getoption(opt.dest)
    if value is None:
        value = config.getini(opt.dest)
    return str(value) if value not in (None, "") else opt.default


def get_path(config: pytest.Config, flag: str) -> Path:
    """A path option resolved against the rootdir when relative."""
    path = Path(get(config, flag))
    return path if path.is_absolute() else config.rootpath / path


def parse_temperatures(text: str) -> dict[str, float]:
    """``"choice=2.2,noul=2.13"`` -> ``{"choice": 2.2, "noul": 2.13, "score": 1.0}``."""
    out = {"choice": 1.0, "noul": 1.0, "score": 1.0}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name not in out:
            raise pytest.UsageError(f"--temperatures: unknown primitive {name!r} (known: choice, noul, score)")
        try:
            out[name] = float(value)
        except ValueError:
            raise pytest.UsageError(f"--temperatures: {part!r} is not primitive=number") from None
    return out
