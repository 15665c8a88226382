"""Scorer workloads for benchmarks: a SmolVLM-256M-shaped checkpoint built from config and photo-like rows.

The model has SmolVLM-256M's sizes (SigLIP 768 x 12 layers at 512 px, patch 16; Llama 576 x 30
layers, 9 heads / 3 KV heads, MLP 1536, vocabulary 49,280; pixel shuffle 4 = 64 image tokens per
512 px tile, no image splitting) with random weights and the embedded default's tokenizer. The
rows are 512 px images of smooth random colour fields (one per row) with a four-option question.
``build --split`` gives the processor SmolVLM-256M's own tiling instead (images scaled to 2048 px and
cut into 512 px tiles plus the whole image: 17 tiles, 1,088 image tokens for a square photo), for
``run --image-size 1024``: the photo regime where preprocessing is the host's main cost.

    python -m laya_robustness.scoring.bench build /tmp/smolvlm-256m-shaped
    python -m laya_robustness.scoring.bench run /tmp/smolvlm-256m-shaped --device cuda --out result.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from laya_robustness.rng import keyed_rng
from laya_robustness.rows import Row

PHOTO_SIZE = 512
PHOTO_ROWS = 6
COLOURS = ("red", "green", "blue", "yellow")


def smolvlm_256m_shaped(image_size: int = 512, split: bool = False):
    """(config, processor) of an Idefics3 with SmolVLM-256M's sizes: one ``image_size`` tile per image, or with
    ``split`` images scaled to 4 x ``image_size`` and cut into tiles of ``image_size`` (SmolVLM-256M's own)."""
    from transformers import Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from laya_robustness.scoring.tiny_checkpoints import tokenizer
    from laya_robustness.tiny_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    tok = tokenizer(bos="<|im_start|>", eos="<end_of_utterance>", pad="<|endoftext|>", special=tuple(SPECIAL_TOKENS))
    patch, scale = 16, 4
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True, size={"longest_edge": 4 * image_size if split else image_size},
        max_image_size={"longest_edge": image_size}, do_image_splitting=split, image_mean=[0.5] * 3,
        image_std=[0.5] * 3)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok,
                                  image_seq_len=(image_size // patch) ** 2 // scale**2, chat_template=CHAT_TEMPLATE)
    config = Idefics3Config(
        vision_config={"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                       "num_attention_heads": 12, "image_size": image_size, "patch_size": patch},
        text_config={"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49280,
                     "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True,
                     "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
                     "eos_token_id": tok.eos_token_id},
        scale_factor=scale, image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id)
    return config, processor


def build_256m_shaped(out_dir: str | Path, seed: int = 0, image_size: int = 512, split: bool = False) -> Path:
    """Build and save the SmolVLM-256M-shaped checkpoint (random weights, about 0.9 GB)."""
    from laya_robustness.scoring.tiny_checkpoints import build_model, save_processor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config, processor = smolvlm_256m_shaped(image_size, split)
    build_model(config, seed).save_pretrained(out)
    save_processor(processor, out)
    return out


def photo(index: int, size: int = PHOTO_SIZE, seed: int = 0):
    """A smooth random colour field with noise: a photo-sized image that no two rows share."""
    import numpy as np
    from PIL import Image

    rng = keyed_rng(seed, "photo", index)
    coarse = rng.uniform(0, 255, size=(8, 8, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), dtype=np.float64)
    noisy = np.clip(field + rng.normal(0, 12, size=field.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(noisy, "RGB")


def photo_rows(n: int = PHOTO_ROWS, size: int = PHOTO_SIZE, seed: int = 0) -> list[Row]:
    """``n`` four-option rows, each about its own photo."""
    return [Row(row_id=f"photos/{i:03d}", dataset="photos", group_id=f"photos/{i:03d}", cluster=f"photos/{i:03d}",
                images=(photo(i, size, seed),), question="Which colour covers most of the picture?",
                options=COLOURS, label=i % len(COLOURS)) for i in range(n)]


def workload(n: int = PHOTO_ROWS, size: int = PHOTO_SIZE, seed: int = 0) -> list[Row]:
    """The photo rows and their option_order variants (6 rows give 36 scored rows)."""
    from laya_robustness.families import build_variants

    rows = photo_rows(n, size, seed)
    return rows + build_variants("option_order", rows, seed)


def peak_memory_bytes(device: str) -> int:
    """Peak CUDA memory allocated on ``device``, or this process's peak resident set on the CPU."""
    if str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run(model_dir: str | Path, *, device: str = "cpu", path: str = "batch", batch_size: int = 16,
        precision: str = "auto", n: int = PHOTO_ROWS, size: int = PHOTO_SIZE) -> dict:
    """Load the checkpoint, score the workload once on ``path``; timings, counters and peak memory."""
    from laya_robustness.scoring import load_scorer

    rows = workload(n, size)
    started = time.perf_counter()
    scorer = load_scorer("hf", str(model_dir), device=device, precision=precision, batch_size=batch_size)
    loaded = time.perf_counter()
    if path == "batch":
        scorer.score_batch(rows)
    elif path == "per_option":
        scorer.score_batch_per_option(rows)
    else:
        for row in rows:
            scorer.score_predict([row], use_cache=path == "predict_cached")
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
    done = time.perf_counter()
    return {"path": path, "device": device, "rows": len(rows), "distinct_images": n, "load_s": round(loaded - started, 3),
            "score_s": round(done - loaded, 3), "rows_per_s": round(len(rows) / (done - loaded), 3),
            "peak_memory_bytes": peak_memory_bytes(device), "stats": dict(scorer.stats),
            "batch_precision": scorer.batch_precision() if path in ("batch", "per_option") else "fp32"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laya_robustness.scoring.bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and save the SmolVLM-256M-shaped checkpoint")
    build.add_argument("out")
    build.add_argument("--image-size", type=int, default=512)
    build.add_argument("--split", action="store_true", help="SmolVLM-256M's tiling (4 x image-size, cut in tiles)")
    bench = sub.add_parser("run", help="score the photo workload once and print / save the numbers")
    bench.add_argument("model")
    bench.add_argument("--device", default="cpu")
    bench.add_argument("--path", default="batch", choices=("batch", "per_option", "predict_cached", "predict_uncached"))
    bench.add_argument("--batch-size", type=int, default=16)
    bench.add_argument("--precision", default="auto")
    bench.add_argument("--rows", type=int, default=PHOTO_ROWS)
    bench.add_argument("--image-size", type=int, default=PHOTO_SIZE)
    bench.add_argument("--out")
    bench.add_argument("--keep-freed-memory", default="yes", choices=("yes", "no"),
                       help="glibc malloc keeps freed memory for reuse, as the gate does by default")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build_256m_shaped(args.out, image_size=args.image_size, split=args.split))
        return 0
    from laya_robustness.scoring.malloc import keep_freed_memory

    kept = args.keep_freed_memory == "yes" and keep_freed_memory()
    result = run(args.model, device=args.device, path=args.path, batch_size=args.batch_size,
                 precision=args.precision, n=args.rows, size=args.image_size)
    result["keep_freed_memory"] = kept
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
