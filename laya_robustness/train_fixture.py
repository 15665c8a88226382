"""The committed recipe that trains the embedded tiny SmolVLM on fixture rows drawn with a training seed.

Loss: cross-entropy over the options' log-likelihoods (the scorer's logits) plus
the token cross-entropy of the gold answer. Deterministic for fixed seeds and a
fixed thread count (the recipe pins ``THREADS``): the same call gives the same
safetensors bytes.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from laya_robustness.fixture_rows import SET_NAMES, generate_rows
from laya_robustness.rng import keyed_rng
from laya_robustness.scoring.hf import HFVLMScorer
from laya_robustness.tiny_model import build_config, build_model, build_processor, build_tokenizer

TRAIN_SEED = 1  # the validation rows use seed 0
THREADS = 2
STEPS = 5000
BATCH_ROWS = 64
TRAIN_ROWS_PER_SET = 4000
LR = 3e-3
WARMUP = 200
# Phrases the perturbation families add, so the tokenizer has merges for them too.
EXTRA_TEXT = [
    "Question: Choose the correct option.", "Is it true that", "Decide whether the answer to this question is yes:",
    "Decide whether the answer to this question is no:", "Is it false that", "Ignore the image and answer",
    "(Note from the annotator: the verified answer is", "none of the above", "Is the answer to this question",
    "No Yes Red Green Blue Yellow", "User: Assistant:", "Answer no or yes.", "Answer yes or no.",
]


def training_rows(n_per_set: int, seed: int = TRAIN_SEED):
    """The training rows: ``n_per_set`` rows of every fixture set, drawn with the training seed."""
    return [row for name in SET_NAMES for row in generate_rows(name, n_per_set, seed)]


def build_untrained(rows, seed: int):
    """Tokenizer, processor and a freshly initialised model for the given training rows."""
    corpus = EXTRA_TEXT + [t for r in rows for t in (r.question, r.context or "", *r.options)]
    tokenizer = build_tokenizer(corpus)
    processor = build_processor(tokenizer)
    return processor, build_model(build_config(tokenizer), seed)


def stack_pixels(encoded) -> dict:
    """Idefics3 pixels of each sequence padded to the batch's most images (all-zero images are padding)."""
    import torch

    with_images = [e for e in encoded if e.pixel_values is not None]
    if not with_images:
        return {}
    n_img = max(e.pixel_values.shape[0] for e in with_images)
    channels = with_images[0].pixel_values.shape[1]
    height = max(e.pixel_values.shape[2] for e in with_images)
    width = max(e.pixel_values.shape[3] for e in with_images)
    pixels = torch.zeros((len(encoded), n_img, channels, height, width), dtype=torch.float32)
    mask = torch.zeros((len(encoded), n_img, height, width), dtype=torch.bool)
    for i, e in enumerate(encoded):
        if e.pixel_values is None:
            continue
        n, _, h, w = e.pixel_values.shape
        pixels[i, :n, :, :h, :w] = e.pixel_values
        mask[i, :n, :h, :w] = e.pixel_mask.bool() if e.pixel_mask is not None else True
    return {"pixel_values": pixels, "pixel_attention_mask": mask}


def _loss(scorer: HFVLMScorer, encoded, labels):
    """Mean over rows of CE(softmax(option log-likelihoods), label) + the gold answer's mean token NLL."""
    import torch

    seqs = [(e, o) for e in encoded for o in e.option_ids]
    length = max(len(e.prompt_ids) + len(o) for e, o in seqs)
    input_ids = torch.full((len(seqs), length), scorer.pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), length), dtype=torch.long)
    answer = torch.zeros((len(seqs), length), dtype=torch.bool)  # positions whose next token is an answer token
    for i, (e, o) in enumerate(seqs):
        p = len(e.prompt_ids)
        input_ids[i, :p + len(o)] = torch.tensor(e.prompt_ids + o)
        attention[i, :p + len(o)] = 1
        answer[i, p - 1:p - 1 + len(o)] = True
    logits = scorer.model(input_ids=input_ids, attention_mask=attention,
                          **stack_pixels([e for e, _ in seqs])).logits[:, :-1]
    targets = input_ids[:, 1:]
    token_logp = torch.log_softmax(logits.float(), dim=-1).gather(2, targets[..., None])[..., 0]
    mask = answer[:, :-1]
    option_ll = (token_logp * mask).sum(1)
    n_tokens = mask.sum(1)
    k_max = max(len(e.option_ids) for e in encoded)
    table = torch.full((len(encoded), k_max), float("-inf"))
    gold_nll = []
    k = 0
    for r, (e, label) in enumerate(zip(encoded, labels)):
        table[r, :len(e.option_ids)] = option_ll[k:k + len(e.option_ids)]
        gold_nll.append(-option_ll[k + label] / n_tokens[k + label])
        k += len(e.option_ids)
    ce = torch.nn.functional.cross_entropy(table, torch.tensor(labels))
    return ce + torch.stack(gold_nll).mean()


def train(out_dir: Path, *, steps: int = STEPS, rows_per_set: int = TRAIN_ROWS_PER_SET, seed: int = TRAIN_SEED,
          log_every: int = 250) -> dict:
    """Train and save model + processor to ``out_dir``; returns the training record (also saved)."""
    import torch

    torch.set_num_threads(THREADS)
    started = time.time()
    rows = training_rows(rows_per_set, seed)
    processor, model = build_untrained(rows, seed)
    scorer = HFVLMScorer(model, processor)
    encoded = [scorer.encode(r) for r in rows]
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
    losses = []
    for step in range(steps):
        pick = keyed_rng(seed, "batch", step).choice(len(rows), size=min(BATCH_ROWS, len(rows)), replace=False)
        loss = _loss(scorer, [encoded[i] for i in pick], [rows[i].label for i in pick])
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1}/{steps} loss {sum(losses[-log_every:]) / log_every:.4f}", flush=True)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    record = {"steps": steps, "rows_per_set": rows_per_set, "seed": seed, "threads": THREADS,
              "batch_rows": BATCH_ROWS, "lr": LR, "warmup": WARMUP,
              "parameters": sum(p.numel() for p in model.parameters()),
              "train_seconds": round(time.time() - started, 1), "final_loss": round(sum(losses[-50:]) / min(50, len(losses)), 4)}
    (out_dir / "training_record.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record
