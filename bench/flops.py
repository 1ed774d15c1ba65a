"""Model FLOPs of one training update, and this machine's matmul peak at the model's own GEMM shapes.

FLOPs count the matrix products of an encoder-decoder update, 2·M·N·K each: every projection,
the attention scores and their weighted sums, and the output projection; the backward pass costs
twice the forward (one product for the input's gradient, one for the weight's). Embedding lookups,
elementwise work, softmax, layer norms, the loss and the optimizer are not counted: they are the
overhead that model FLOP utilization (MFU) shows.

The peak is measured, not taken from a data sheet: each product of the update (forward, and both
backward orientations) is timed with torch.matmul at its own shape, dtype and thread count, and
the peak is the update's FLOPs over the sum of those best times: what the update would take if
the products ran as fast as matmul alone runs them and nothing else took time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from pipeline import params as P


@dataclass(frozen=True)
class Gemm:
    """`batch` products of an (m, k) by a (k, n) matrix, `count` times in one forward pass."""

    m: int
    n: int
    k: int
    batch: int = 1
    count: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch * self.count

    def backward(self) -> tuple[Gemm, Gemm]:
        """The input's gradient, (m, n) x (n, k), and the weight's, (k, m) x (m, n)."""
        return (
            Gemm(self.m, self.k, self.n, self.batch, self.count),
            Gemm(self.k, self.n, self.m, self.batch, self.count),
        )


def forward_gemms(cfg: P.ModelParams, vocab: int, batch: int, src_len: int, tgt_len: int) -> list[Gemm]:
    """The products of one forward pass of the encoder-decoder on `batch` rows of src_len / tgt_len."""
    if cfg.arch != "encoder_decoder":
        raise ValueError(f"model.arch={cfg.arch}: FLOPs are counted for the encoder-decoder only")
    d, ff, heads = cfg.d_model, cfg.d_ff, cfg.n_heads
    head_dim = d // heads
    src, tgt = batch * src_len, batch * tgt_len
    enc, dec = cfg.n_encoder_layers, cfg.n_decoder_layers

    def attention(queries: int, keys: int, layers: int) -> list[Gemm]:
        """Scores (q x head_dim by head_dim x k) and weighted values, per row and head."""
        return [
            Gemm(queries, keys, head_dim, batch * heads, layers),
            Gemm(queries, head_dim, keys, batch * heads, layers),
        ]

    return [
        # encoder: q, k, v and out projections, the FFN, self-attention
        Gemm(src, d, d, count=4 * enc),
        Gemm(src, ff, d, count=enc),
        Gemm(src, d, ff, count=enc),
        *attention(src_len, src_len, enc),
        # decoder: self-attention's four projections, cross-attention's q and out (on the target)
        # and k, v (on the encoder's output), the FFN, both attentions
        Gemm(tgt, d, d, count=6 * dec),
        Gemm(src, d, d, count=2 * dec),
        Gemm(tgt, ff, d, count=dec),
        Gemm(tgt, d, ff, count=dec),
        *attention(tgt_len, tgt_len, dec),
        *attention(tgt_len, src_len, dec),
        # output projection onto the vocabulary
        Gemm(tgt, vocab, d),
    ]


def update_gemms(forward: Iterable[Gemm]) -> list[Gemm]:
    """Forward, and the two backward products of each."""
    return [g for f in forward for g in (f, *f.backward())]


def update_flops(cfg: P.ModelParams, vocab: int, batch: int, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one whole update (forward and backward)."""
    return sum(g.flops for g in update_gemms(forward_gemms(cfg, vocab, batch, src_len, tgt_len)))


def best_seconds(gemm: Gemm, dtype: torch.dtype, min_seconds: float, repeats: int = 3) -> float:
    """The best of `repeats` timings of one product at this shape (each timed over >= min_seconds)."""
    shape_a = (gemm.batch, gemm.m, gemm.k) if gemm.batch > 1 else (gemm.m, gemm.k)
    shape_b = (gemm.batch, gemm.k, gemm.n) if gemm.batch > 1 else (gemm.k, gemm.n)
    a, b = torch.randn(shape_a).to(dtype), torch.randn(shape_b).to(dtype)
    torch.matmul(a, b)  # warm-up: kernel choice, packing
    best = float("inf")
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            torch.matmul(a, b)
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        best = min(best, elapsed / n)
    return best


def measured_peak(gemms: list[Gemm], dtype: torch.dtype, min_seconds: float = 0.05) -> float:
    """FLOP/s of these products run one after another at matmul's best speed for each shape."""
    seconds: dict[tuple[int, int, int, int], float] = {}
    total_time = 0.0
    for g in gemms:
        key = (g.m, g.n, g.k, g.batch)
        if key not in seconds:
            seconds[key] = best_seconds(g, dtype, min_seconds)
        total_time += seconds[key] * g.count
    return sum(g.flops for g in gemms) / total_time
