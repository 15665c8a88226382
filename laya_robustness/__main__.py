"""Command line: ``python -m laya_robustness {summarize,floor,report,trend,compare,served-check,limitations,stability,
variants,calibrate-gate,fixtures,export-parquet}``.

Exit codes: 0 done, 3 a model that cannot be loaded, 4 a usage error (a bad or unreadable input file, a bad
argument), printed as one line.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

from laya_robustness.run.files import atomic_write, refuse_other, staged_folder

FIXTURES = Path("laya_fixtures")
HARNESS_ERROR, USAGE_ERROR = 3, 4
#: File-system errors that are the machine's, not the input's: a full disk or quota, a failing device.
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def _calibrate(args) -> int:
    from laya_robustness.analysis.calibrate import calibrate, format_calibration

    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    result = calibrate(args.seeds, args.out, args.pytest_args, plant=args.plant, plant_rate=args.plant_rate)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "calibration.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(format_calibration(result))
    return 0


def _summarize(args) -> int:
    from laya_robustness.report.offline import summarize_file

    return summarize_file(args.predictions, args.out, ece_floor_sims=args.ece_floor_sims)


def _floor(args) -> int:
    from laya_robustness.report.offline import print_floor

    return print_floor(args.predictions, sims=args.sims, seed=args.seed)


def _report(args) -> int:
    from laya_robustness.report import render_files

    thresholds = args.thresholds
    if thresholds is not None and not thresholds.is_file():
        raise FileNotFoundError(f"--thresholds: no such file {thresholds}")
    paths = render_files(args.predictions, args.out, baseline=args.baseline, data=args.data,
                         thresholds=thresholds if thresholds is not None else Path("thresholds.toml"),
                         limitations=args.limitations)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _trend(args) -> int:
    from laya_robustness.report.trend import read_checkpoints, trend_html, trend_table

    checkpoints = read_checkpoints(args.folders, mix=args.mix)
    print("\n".join(trend_table(checkpoints)))
    if args.out is not None:
        atomic_write(args.out, trend_html(checkpoints))
        print(f"wrote {args.out}")
    return 0


def _compare(args) -> int:
    from laya_robustness.report.compare import compare, markdown, read_report, text_lines

    comparison = compare(read_report(args.old), read_report(args.new))
    if args.out is not None:
        atomic_write(args.out, markdown(comparison))
    print(markdown(comparison) if args.markdown else "\n".join(text_lines(comparison)))
    return comparison.status


def _served_check(args) -> int:
    from laya_robustness.report.served_check import markdown, read_pair, served_check, text_lines

    check = served_check(*read_pair(args.served, args.inprocess), args.min_agreement, args.max_dp)
    if args.out is not None:
        atomic_write(args.out, markdown(check))
    print(markdown(check) if args.markdown else "\n".join(text_lines(check)))
    return check.status


def _limitations(args) -> int:
    from laya_robustness.report.known_limitations import write_draft

    count = write_draft(args.reports, args.out, thresholds=args.thresholds, replace=args.replace)
    print(f"wrote {args.out}: {count} known limitation{'' if count == 1 else 's'} of the weights gated in "
          f"{args.reports} (each reason a draft: say why these weights miss it); apply it with "
          f"--limitations {args.out}")
    return 0


def _stability(args) -> int:
    from laya_robustness.analysis.study import stability_report

    layerwise = None
    if args.layerwise:
        missing = [flag for flag, value in (("--model", args.model), ("--data", args.data),
                                            ("--families", args.families)) if not value]
        if missing:
            raise ValueError(f"--layerwise needs {', '.join(missing)}")
        layerwise = {"model": args.model, "data": args.data, "scorer": args.scorer, "device": args.device,
                     "families": [f.strip() for f in args.families.split(",") if f.strip()],
                     "max_groups": args.max_groups, "seed": args.seed, "rows_per_set": args.rows_per_set}
    if args.bins is not None and args.bins < 2:
        raise ValueError(f"--bins must be at least 2, got {args.bins}")
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    return stability_report(args.predictions, names=names, modalities=args.modalities, seed=args.seed,
                            precision=args.precision, bins=args.bins, binning=args.binning,
                            with_entropy=args.with_entropy, json_out=args.json, layerwise=layerwise)


def _variants(args) -> int:
    from laya_robustness.analysis.rewriting.command import run_variants

    return run_variants(args.task, model=args.model, data=args.data, out=args.out, n=args.n, languages=args.languages,
                        batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, device=args.device,
                        rows_per_set=args.rows_per_set, seed=args.seed)


def _variants_parser(sub) -> None:
    from laya_robustness.analysis.rewriting.prompts import DEFAULT_LANGUAGES

    v = sub.add_parser("variants", help="write rephrasings or translations of the questions with a language model "
                       "(the files --rephrasings and --translations read)")
    v.add_argument("task", choices=("rephrase", "translate"))
    v.add_argument("--model", required=True, help="hub id (from the local cache) or directory of a causal language "
                   "model with a chat template")
    v.add_argument("--data", type=Path, required=True, help="the rows whose questions get variants (as the gate's "
                   "--data)")
    v.add_argument("--out", type=Path, required=True, help="the .jsonl file to write; F.rejects.jsonl and "
                   "F.stats.json go beside it")
    v.add_argument("--n", type=int, default=10, help="rephrase: rephrasings asked per question (default: 10)")
    v.add_argument("--languages", default=",".join(DEFAULT_LANGUAGES), help="translate: comma-separated language "
                   f"codes (default: {','.join(DEFAULT_LANGUAGES)})")
    v.add_argument("--batch-size", type=int, default=8, help="prompts per generation batch (default: 8)")
    v.add_argument("--max-new-tokens", type=int, default=None, help="tokens generated per prompt at most (default: "
                   "512 for rephrase, 128 for translate)")
    v.add_argument("--device", default="cpu", help="device of the model: cpu (fp32) or cuda[:N] (bf16) (default: cpu)")
    v.add_argument("--rows-per-set", type=int, default=0, help="rows sampled per dataset as the gate samples them "
                   "(default: 0, every row)")
    v.add_argument("--seed", type=int, default=0, help="seed of that sampling (default: 0)")
    v.set_defaults(run=_variants)


def _fixture_rows(args) -> int:
    from laya_robustness.recipes.fixture_rows import ROWS_PER_SET, VALIDATION_SEED, write_fixture_rows

    n_rows = args.rows_per_set if args.rows_per_set is not None else ROWS_PER_SET
    seed = args.seed if args.seed is not None else VALIDATION_SEED
    with staged_folder(args.out) as stage:
        paths = [args.out / path.relative_to(stage) for path in write_fixture_rows(stage, n_rows=n_rows, seed=seed)]
    for path in paths:
        print(f"wrote {path}")
    return 0


def _fixture_train(args) -> int:
    from laya_robustness.recipes.train_smolvlm import STEPS, TRAIN_SEED, train

    seed = args.seed if args.seed is not None else TRAIN_SEED
    with staged_folder(args.out) as stage:
        record = train(stage, steps=args.steps if args.steps is not None else STEPS, seed=seed)
    print(record)
    return 0


def _fixture_captions(args) -> int:
    from laya_robustness.recipes.fixture_captions import N_IMAGES, VALIDATION_SEED, write_fixture_captions

    n_images = args.images if args.images is not None else N_IMAGES
    seed = args.seed if args.seed is not None else VALIDATION_SEED
    with staged_folder(args.out) as stage:
        written = args.out / write_fixture_captions(stage, n_images=n_images, seed=seed).relative_to(stage)
    print(f"wrote {written}")
    return 0


def _fixture_clip(args) -> int:
    from laya_robustness.recipes.train_clip import EMBEDDED, STEPS, TRAIN_SEED, train

    with staged_folder(args.out) as stage:
        record = train(stage, steps=args.steps if args.steps is not None else STEPS,
                       seed=args.seed if args.seed is not None else TRAIN_SEED,
                       vocabulary=args.vocabulary if args.vocabulary is not None else EMBEDDED)
    print(record)
    return 0


def _fixture_gguf(args) -> int:
    from laya_robustness.recipes.gguf import FILES, sha256, write_gguf

    for name in FILES:  # renamed over by the converter's output: a link or device there is refused (exit 4)
        refuse_other(args.out / name)
    try:
        paths = write_gguf(args.out, source=args.llama_cpp, checkpoint=args.checkpoint)
    except FileNotFoundError:  # no converter: main() reports it as bad input
        raise
    except (RuntimeError, OSError) as exc:  # the converter failed (its output says why), or out cannot be written
        print(f"error: {exc} ({args.out} keeps the files it had)", file=sys.stderr)
        return HARNESS_ERROR
    for path in paths:
        print(f"wrote {path} ({path.stat().st_size:,} bytes, sha256 {sha256(path)})")
    return 0


def _export_parquet(args) -> int:
    from laya_robustness.loaders.export import export_parquet
    from laya_robustness.loaders.settings import LoadSettings

    # the export keeps every image at its size (the gate scales them down when it reads them)
    settings = LoadSettings(args.data_map, args.max_image_pixels, args.allow_outside_data, max_image_side=0)
    try:
        paths = export_parquet(args.data, args.out, settings, write=atomic_write)  # RowError, FileNotFoundError
    except ImportError as exc:  # the datasets extra is not installed
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    for path in paths:
        print(f"wrote {path}")
    return 0


def _option_type(parse):
    """An argparse type from one of the loaders' option parsers (their ValueError becomes a usage error)."""

    def convert(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (an unknown command, a missing or bad argument) exit 4, the gate's usage
    error, not argparse's 2 (pytest's "interrupted")."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    from laya_robustness.loaders import settings as load_settings

    p = Parser(prog="python -m laya_robustness", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="re-make summary.json from a predictions file, no model")
    s.add_argument("predictions", type=Path)
    s.add_argument("--out", type=Path, default=None, help="where to write the summary (default: beside the "
                   "predictions, as summary.offline.json)")
    s.add_argument("--ece-floor-sims", type=int, default=0, metavar="N",
                   help="add the ECE noise floor block, N calibrated redraws per cell (default: 0, none)")
    s.set_defaults(run=_summarize)
    fl = sub.add_parser("floor", help="print the ECE noise floor of a predictions file, no model")
    fl.add_argument("predictions", type=Path)
    fl.add_argument("--sims", type=int, default=200, help="calibrated redraws per cell (default: 200)")
    fl.add_argument("--seed", type=int, default=0, help="seed of the redraws (default: 0)")
    fl.set_defaults(run=_floor)
    c = sub.add_parser("calibrate-gate", help="run the gate under several seeds (and a planted regression) and "
                       "report its false alarms and its power")
    c.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default: 10)")
    c.add_argument("--out", type=Path, default=Path("reports") / "calibration", help="where the runs and "
                   "calibration.json go (default: reports/calibration)")
    c.add_argument("--plant", default=None, metavar="FAMILY", help="also run with a planted regression in FAMILY "
                   "against each seed's unchanged predictions")
    c.add_argument("--plant-rate", type=float, default=0.05, help="share of FAMILY's answers moved (default: 0.05)")
    c.add_argument("pytest_args", nargs="*", help="more options for every gate run (after --)")
    c.set_defaults(run=_calibrate)
    rp = sub.add_parser("report", help="render report.html and summary.md from a predictions file, no model")
    rp.add_argument("predictions", type=Path, help="predictions.jsonl.gz (its summary.json and invariance.json "
                    "beside it are read when present)")
    rp.add_argument("--baseline", type=Path, default=None, metavar="PRED",
                    help="another run's predictions.jsonl.gz (or summary.json) to compare with")
    rp.add_argument("--out", type=Path, default=None, metavar="DIR", help="where to write (default: beside the "
                    "predictions)")
    rp.add_argument("--data", type=Path, default=None, metavar="DIR",
                    help="the rows the run scored, to rebuild the shown examples with their images (default: the "
                    "summary meta's data; without it the examples show no images)")
    rp.add_argument("--thresholds", type=Path, default=None, metavar="FILE",
                    help="the limits the verdicts are computed with (default: ./thresholds.toml if present, else "
                    "no verdicts)")
    rp.add_argument("--limitations", default="auto", metavar="auto|none|FILE",
                    help="overlay of known limitations, as the gate's --limitations (default: auto)")
    rp.set_defaults(run=_report)
    tr = sub.add_parser("trend", help="each headline across checkpoints (their report folders, in step order) and "
                        "the paired change between consecutive ones, no model")
    tr.add_argument("folders", type=Path, nargs="+", metavar="DIR", help="report folders, e.g. robustness/checkpoint-*")
    tr.add_argument("--out", type=Path, default=None, metavar="HTML", help="also write a page with one plot per "
                    "family beside the table (e.g. trend.html)")
    tr.add_argument("--mix", action="store_true", help="show checkpoints of different configurations (rows, seed, "
                    "rows per set, families, scoring, model) side by side instead of refusing them (exit 4)")
    tr.set_defaults(run=_trend)
    cp = sub.add_parser("compare", help="what moved beyond noise from one run's reports to another's (a pull "
                        "request's comment), no model; exit 0 no regression beyond noise, 1 one, 4 not comparable")
    cp.add_argument("old", type=Path, metavar="OLD", help="the earlier run's report folder (e.g. the main branch's)")
    cp.add_argument("new", type=Path, metavar="NEW", help="the new run's report folder")
    cp.add_argument("--markdown", action="store_true", help="print markdown (a pull request comment) instead of text")
    cp.add_argument("--out", type=Path, default=None, metavar="MD", help="also write the markdown to this file")
    cp.set_defaults(run=_compare)
    sc = sub.add_parser("served-check", help="a served deploy's answers against the checkpoint's in process, on the "
                        "questions both runs asked, no model; exit 0 the same, 1 a limit crossed, 4 not comparable")
    sc.add_argument("served", type=Path, metavar="SERVED", help="the served run's report folder")
    sc.add_argument("inprocess", type=Path, metavar="INPROCESS", help="the report folder of the checkpoint run in "
                    "process (the same data and seed; its rows per set may differ)")
    sc.add_argument("--min-agreement", type=float, default=0.95, metavar="SHARE", help="the least share of "
                    "questions of a family answered alike (default: 0.95)")
    sc.add_argument("--max-dp", type=float, default=0.1, metavar="P", help="the largest |dp| of a question: the "
                    "difference of the probabilities of the option INPROCESS chose (default: 0.1)")
    sc.add_argument("--markdown", action="store_true", help="print markdown instead of text")
    sc.add_argument("--out", type=Path, default=None, metavar="MD", help="also write the markdown to this file")
    sc.set_defaults(run=_served_check)
    kl = sub.add_parser("limitations", help="draft the known limitations of the weights one run gated (its failed "
                        "checks, [measured_on] its weights) as an overlay for --limitations, no model")
    kl.add_argument("reports", type=Path, metavar="DIR", help="the run's report folder (summary.json, checks.json, "
                    "predictions.jsonl.gz)")
    kl.add_argument("--out", type=Path, required=True, metavar="TOML", help="where to write the overlay")
    kl.add_argument("--thresholds", type=Path, default=Path("thresholds.toml"), metavar="FILE",
                    help="the limits file the run was judged with, the draft read back against it "
                    "(default: thresholds.toml)")
    kl.add_argument("--replace", action="store_true", help="write over an existing --out")
    kl.set_defaults(run=_limitations)
    st = sub.add_parser("stability", help="the stability analyses of one or more predictions files (same rows)")
    st.add_argument("predictions", type=Path, nargs="+")
    st.add_argument("--names", default=None, help="comma-separated model names (default: each file's folder)")
    st.add_argument("--modalities", default=None, metavar="FAMILY=MODALITY,...",
                    help="override the declared family modalities (visual, phrasing, language or none)")
    st.add_argument("--seed", type=int, default=None, help="seed of the predictor's split and the layerwise rows "
                    "(default: the summary.json beside the first file, else 0)")
    st.add_argument("--precision", type=float, default=0.92, help="precision the predictor's recall is read at "
                    "(default: 0.92)")
    st.add_argument("--bins", type=int, default=None, help="levels per variable of the mutual information ratio "
                    "(default: by sample size, at least 8 samples per cell: 3 at 240 samples, 9 at 7,600, at most 10)")
    st.add_argument("--binning", choices=("quantile", "width"), default="quantile",
                    help="equal-frequency or equal-width bins (default: quantile)")
    st.add_argument("--with-entropy", action="store_true", help="add the source's entropies to the predictor")
    st.add_argument("--json", type=Path, default=None, help="also write every number to this JSON file")
    st.add_argument("--layerwise", action="store_true", help="the layerwise divergence of the first file "
                    "(needs --model, --data, --families)")
    st.add_argument("--model", default=None, help="layerwise: the model that made the first file")
    st.add_argument("--data", type=Path, default=None, help="layerwise: the rows the first file was scored on")
    st.add_argument("--families", default=None, help="layerwise: comma-separated families to re-build")
    st.add_argument("--scorer", default="hf", help="layerwise: hf or a plug-in module:function (default: hf)")
    st.add_argument("--device", default="cpu", help="layerwise: device of the model (default: cpu)")
    st.add_argument("--rows-per-set", type=int, default=None, help="layerwise: rows per set of the run "
                    "(default: the summary.json beside the file, else 0)")
    st.add_argument("--max-groups", type=int, default=0, help="layerwise: first N groups per dataset (default: all)")
    st.set_defaults(run=_stability)
    _variants_parser(sub)
    f = sub.add_parser("fixtures", help="re-make the embedded default (rows, checkpoint)")
    fsub = f.add_subparsers(dest="what", required=True)
    r = fsub.add_parser("rows", help="draw the fixture validation rows")
    r.add_argument("--out", type=Path, default=FIXTURES / "rows")
    r.add_argument("--rows-per-set", type=int, default=None)
    r.add_argument("--seed", type=int, default=None)
    r.set_defaults(run=_fixture_rows)
    t = fsub.add_parser("train", help="train the tiny SmolVLM checkpoint (about 50 minutes on 2 cores)")
    t.add_argument("--out", type=Path, default=FIXTURES / "tiny-smolvlm")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--seed", type=int, default=None, help="seed of the training rows, the initial weights and the "
                   "batches (default: 1; the validation rows use 0)")
    t.set_defaults(run=_fixture_train)
    c = fsub.add_parser("captions", help="draw the fixture caption set (coloured-shape scenes, seed 0)")
    c.add_argument("--out", type=Path, default=FIXTURES / "captions")
    c.add_argument("--images", type=int, default=None, help="scenes to draw (default: 100)")
    c.add_argument("--seed", type=int, default=None)
    c.set_defaults(run=_fixture_captions)
    k = fsub.add_parser("clip", help="train the tiny CLIP dual encoder (a few minutes on 2 cores)")
    k.add_argument("--out", type=Path, default=FIXTURES / "tiny-clip")
    k.add_argument("--steps", type=int, default=None)
    k.add_argument("--seed", type=int, default=None, help="seed of the training captions, the initial weights and "
                   "the batches (default: 1; the validation captions use 0)")
    k.add_argument("--vocabulary", type=Path, default=None, help="CLIP's bpe_simple_vocab_16e6.txt.gz (from the "
                   "clip-anytorch or open-clip-torch wheel) or a directory with vocab.json + merges.txt "
                   "(default: the committed laya_fixtures/tiny-clip)")
    k.set_defaults(run=_fixture_clip)
    g = fsub.add_parser("gguf", help="convert the tiny SmolVLM checkpoint to GGUF for llama.cpp (model.gguf, "
                        "mmproj.gguf; f32, llama.cpp's own converter)")
    g.add_argument("--out", type=Path, default=FIXTURES / "tiny-smolvlm-gguf")
    g.add_argument("--checkpoint", type=Path, default=FIXTURES / "tiny-smolvlm", help="the checkpoint to convert "
                   "(default: laya_fixtures/tiny-smolvlm)")
    g.add_argument("--llama-cpp", type=Path, default=None, help="llama.cpp's source (llama-cpp-python's "
                   "vendor/llama.cpp) (default: $LAYA_LLAMA_CPP_SOURCE, else where scripts/build_llama_server.sh "
                   "unpacks it)")
    g.set_defaults(run=_fixture_gguf)
    e = sub.add_parser("export-parquet", help="write the rows of a --data source as parquet, one file per dataset")
    e.add_argument("data", type=Path, help="a JSONL manifest, TSV, parquet file, datasets directory, or a directory "
                   "of them")
    e.add_argument("out", type=Path, help="the directory to write <dataset>.parquet files into")
    e.add_argument("--data-map", type=_option_type(load_settings.parse_data_map), default={},
                   help="field=column pairs for reading a parquet source (default: none)")
    e.add_argument("--max-image-pixels", type=_option_type(load_settings.parse_max_image_pixels),
                   default=load_settings.DEFAULT_MAX_IMAGE_PIXELS,
                   help=f"largest image read, in pixels or megapixels (default: "
                        f"{load_settings.DEFAULT_MAX_IMAGE_PIXELS})")
    e.add_argument("--allow-outside-data", type=_option_type(load_settings.parse_allow_outside_data), default=False,
                   help="yes: read image paths outside the data directory (default: no)")
    e.set_defaults(run=_export_parquet)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "out", "") is None and args.command == "summarize":
        args.out = args.predictions.with_name("summary.offline.json")
    from laya_robustness.scoring.base import ModelLoadError

    try:
        return args.run(args)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return HARNESS_ERROR
    except OSError as exc:  # a full disk or a failing device is the machine's (3); a missing or unreadable file, input
        print(f"error: {exc}", file=sys.stderr)
        return HARNESS_ERROR if exc.errno in MACHINE_ERRNOS else USAGE_ERROR
    except ValueError as exc:  # PredictionError, RowError and ThresholdsError are ValueErrors
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
