"""The committed recipe that trains the embedded tiny CLIP on fixture captions drawn with a training seed.

Each step takes ``BATCH_IMAGES`` training images, one caption of each and up to
``HARD_NEGATIVES`` of that caption's semantic flips (``lgip.scene_flips``: a colour, shape or
count changed so it contradicts the scene). Loss: CLIP's symmetric in-batch contrastive loss,
where the image-to-text side also ranks every hard negative of the batch:

    L = (CE(t * U V^T, diag) + CE(t * V_pos U^T, diag)) / 2

with U the normalised image embeddings, V the normalised texts (positives first, then the
hard negatives), t = exp(logit_scale) clamped to 100. Deterministic for fixed seeds and a
fixed thread count (the recipe pins ``THREADS`` while it trains): the same call gives the same safetensors bytes.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from laya_robustness.captions import generate_captions
from laya_robustness.lgip import scene_flips
from laya_robustness.rng import keyed_rng
from laya_robustness.tiny_clip import (build_config, build_model, build_processor, build_tokenizer, save_checkpoint,
                                       vocabulary_from)

TRAIN_SEED = 1  # the validation captions use seed 0
TRAIN_SET = "shape_captions_train"
THREADS = 1  # one thread: deterministic, and steady on a shared machine (2 threads were 3-10x slower there)
STEPS = 3000
BATCH_IMAGES = 64
TRAIN_IMAGES = 4000
HARD_NEGATIVES = 2
LR = 1e-3
WARMUP = 100
WEIGHT_DECAY = 0.1
MAX_LOGIT_SCALE = 100.0
EMBEDDED = Path(__file__).resolve().parents[1] / "laya_fixtures" / "tiny-clip"


def training_captions(n_images: int, seed: int = TRAIN_SEED):
    """The training caption rows: ``n_images`` scenes drawn with the training seed, grouped by image."""
    by_image: dict[str, list] = {}
    for row in generate_captions(n_images, seed, dataset=TRAIN_SET):
        by_image.setdefault(row.cluster, []).append(row)
    return list(by_image.values())


def _batch(images, step: int, seed: int, flips_cache: dict) -> tuple[list[int], list[str], list[str]]:
    """Image indices, one caption per image and the hard negatives of the step (all from the keyed RNG)."""
    rng = keyed_rng(seed, "clip_batch", step)
    pick = [int(i) for i in rng.choice(len(images), size=min(BATCH_IMAGES, len(images)), replace=False)]
    positives, negatives = [], []
    for i in pick:
        row = images[i][int(rng.integers(len(images[i])))]
        text = row.options[0]
        if row.row_id not in flips_cache:
            flips_cache[row.row_id] = sorted({f.text for f in scene_flips(text, row.meta["objects"])})
        pool = flips_cache[row.row_id]
        take = rng.choice(len(pool), size=min(HARD_NEGATIVES, len(pool)), replace=False) if pool else []
        positives.append(text)
        negatives += [pool[int(k)] for k in take]
    return pick, positives, negatives


def _loss(model, pixels, tokenizer, positives: list[str], negatives: list[str]):
    import torch
    import torch.nn.functional as F

    enc = tokenizer(positives + negatives, padding="longest", return_tensors="pt")
    image = F.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
    text = F.normalize(model.get_text_features(input_ids=enc["input_ids"],
                                               attention_mask=enc["attention_mask"]).pooler_output, dim=-1)
    scale = model.logit_scale.exp().clamp(max=MAX_LOGIT_SCALE)
    target = torch.arange(len(positives))
    image_to_text = F.cross_entropy(scale * image @ text.T, target)
    text_to_image = F.cross_entropy(scale * text[:len(positives)] @ image.T, target)
    return (image_to_text + text_to_image) / 2


def train(out_dir: Path, *, steps: int = STEPS, n_images: int = TRAIN_IMAGES, seed: int = TRAIN_SEED,
          vocabulary: str | Path = EMBEDDED, log_every: int = 250) -> dict:
    """Train and save the tiny CLIP to ``out_dir``; returns the training record (also saved).

    ``vocabulary`` is CLIP's ``bpe_simple_vocab_16e6.txt.gz`` or a directory holding its
    converted vocab.json + merges.txt (by default the committed checkpoint's).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _train(Path(out_dir), steps, n_images, seed, vocabulary, log_every)
    finally:
        torch.set_num_threads(threads)


def _train(out_dir: Path, steps: int, n_images: int, seed: int, vocabulary, log_every: int) -> dict:
    import torch

    started = time.time()
    vocab, merges = vocabulary_from(vocabulary)
    tokenizer = build_tokenizer(vocab, merges)
    processor = build_processor(tokenizer)
    images = training_captions(n_images, seed)
    pixels = processor.image_processor(images=[rows[0].images[0] for rows in images],
                                       return_tensors="pt")["pixel_values"]
    model = build_model(build_config(), seed)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    other = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": other, "weight_decay": 0.0}],
                              lr=LR, betas=(0.9, 0.98), eps=1e-6)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
    flips_cache: dict = {}
    losses = []
    for step in range(steps):
        pick, positives, negatives = _batch(images, step, seed, flips_cache)
        loss = _loss(model, pixels[pick], tokenizer, positives, negatives)
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1}/{steps} loss {sum(losses[-log_every:]) / log_every:.4f}", flush=True)
    model.eval()
    save_checkpoint(model, processor, vocab, merges, out_dir)
    record = {"steps": steps, "train_images": n_images, "seed": seed, "threads": THREADS,
              "batch_images": BATCH_IMAGES, "hard_negatives": HARD_NEGATIVES, "lr": LR, "warmup": WARMUP,
              "weight_decay": WEIGHT_DECAY, "parameters": sum(p.numel() for p in model.parameters()),
              "train_seconds": round(time.time() - started, 1),
              "final_loss": round(sum(losses[-50:]) / max(1, min(50, len(losses))), 4)}
    (out_dir / "training_record.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record
