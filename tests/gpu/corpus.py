"""Synthetic corpora for the GPU tests, so that they need no prepared data and no network.

`write_binarized`: random ids in the binarize stage's format with Multi30k-like lengths (its
training pairs average about 12 German and 13 English words, some 15-17 subwords a side under a
joint 8k BPE), where only the shapes matter. `write_small_run`: a tiny text corpus,
its sentencepiece model and binarized ids, everything `python -m pipeline train` reads.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import torch

from pipeline import params as P
from pipeline.data.batching import Batch
from pipeline.data.shards import write_shard
from pipeline.stages.bpe import train_bpe
from pipeline.tokens import BOS, EOS, N_SPECIAL, PAD

REPO = Path(__file__).resolve().parents[2]

SPLITS = ("train", "val", "test")


def write_side(prefix: Path, seqs: list[np.ndarray]) -> None:
    """One {split}.{side}.bin/.idx pair as binarize writes it (uint16 ids, int64 offsets)."""
    write_shard(prefix, seqs)


def multi30k_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) subword lengths (n,) each: source about 16 +- 6, target about 0.95 of it."""
    src = np.clip(np.rint(rng.normal(16.0, 6.0, n)), 3, 60).astype(np.int64)
    tgt = np.clip(np.rint(src * rng.normal(0.95, 0.15, n)), 2, 60).astype(np.int64)
    return src, tgt


def write_binarized(bin_dir: Path, vocab: int, pairs: dict[str, int], seed: int = 1) -> None:
    """train/val/test splits of pairs[split] random-id sentence pairs over ids [N_SPECIAL, vocab)."""
    rng = np.random.default_rng(seed)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        lengths = multi30k_lengths(rng, pairs[split])
        for side, lens in zip(("src", "tgt"), lengths):
            write_side(bin_dir / f"{split}.{side}", [rng.integers(N_SPECIAL, vocab, n) for n in lens])


def write_small_run(root: Path, vocab_size: int = 64, pairs: int = 400, seed: int = 1) -> tuple[Path, Path]:
    """root/bpe (a joint sentencepiece model of vocab_size pieces) and root/bin (random ids below it,
    Multi30k-like lengths); -> (bin_dir, bpe_dir)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnop"
    word = lambda: "".join(rng.choices(letters, k=rng.randint(1, 6)))
    text = root / "text"
    text.mkdir(parents=True)
    lines = [" ".join(word() for _ in range(rng.randint(3, 12))) for _ in range(500)]
    for side in ("src", "tgt"):
        (text / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # params.yaml's bpe section at this vocabulary size: new settings arrive with their defaults
    bpe = dataclasses.replace(P.load(REPO / "params.yaml").bpe, vocab_size=vocab_size, seed=1)
    train_bpe(bpe, text, root / "bpe")
    write_binarized(root / "bin", vocab_size, {"train": pairs, "val": 20, "test": 20}, seed)
    return root / "bin", root / "bpe"


def synthetic_batch(vocab: int, rows: int, length: int, seed: int = 0) -> Batch:
    """B rows of `length` random ids each side, the last row half padding: src ids + EOS,
    tgt BOS + ids / ids + EOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(N_SPECIAL, vocab, (rows, length + 1), generator=g)
    tgt = torch.randint(N_SPECIAL, vocab, (rows, length + 1), generator=g)
    src[:, -1], tgt[:, 0] = EOS, BOS
    tgt_out = torch.cat([tgt[:, 1:], torch.full((rows, 1), EOS)], dim=1)
    half = length // 2
    src[-1, half:], tgt[-1, half + 1 :], tgt_out[-1, half + 1 :] = PAD, PAD, PAD
    src[-1, half], tgt_out[-1, half] = EOS, EOS
    n_src, n_tgt = int((src != PAD).sum()), int((tgt_out != PAD).sum())
    return Batch(src, tgt, tgt_out, n_src, n_tgt, np.arange(rows))
