"""Model FLOPs of an encoder-decoder update, and the peak to measure them against (MFU).

MFU = model FLOP/s achieved / the peak dense FLOP/s at the precision of the matmuls, as in PaLM
(Chowdhery et al. 2022, appendix B). Two ways to the same count, kept in agreement by the tests:
`update_flops` by PaLM's formula on real (non-PAD) lengths, as gpu_check reports it, and
`forward_gemms` / `update_gemms`, every matrix product of one update at its shape (forward, and the
backward's two products per forward one), with which the CPU benchmark measures its peak: each
product timed with torch.matmul at its own shape, dtype and threads (`measured_peak`). On a GPU the
peak is the datasheet's (`peak_flops`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from pipeline import params as P
from pipeline.model.transformer import Seq2SeqBase

# Dense (no sparsity) peak TFLOP/s by precision of the matmuls, from NVIDIA's datasheets (the H200
# and H100 Tensor Core GPU datasheets, the A100 datasheet, the L40S and L4 product briefs; their
# "with sparsity" figures halved). fp32: plain FP32 (no tensor cores); tf32: fp32 matmuls with
# torch.backends.cuda.matmul.allow_tf32 (off by default, and the pipeline never turns it on).
# Matched in order against torch.cuda.get_device_name(): the first pattern found wins.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H200 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    (r"H200", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),
    (r"H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    (r"H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    (r"H100", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),  # SXM, "H100 80GB HBM3"
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
)


def peak_flops(device_name: str, precision: str, tf32: bool = False) -> float | None:
    """The GPU's dense peak FLOP/s for matmuls in `precision` (fp32, bf16, fp16); None if unknown."""
    key = "tf32" if precision == "fp32" and tf32 else precision
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peaks[key] * 1e12
    return None


def non_embedding_parameters(model: nn.Module) -> tuple[int, int]:
    """(P_enc, P_dec) of an encoder-decoder Transformer: its layers' and final norms' parameters."""
    count = lambda prefixes: sum(
        p.numel() for name, p in model.named_parameters() if name.split(".")[0] in prefixes
    )
    return count({"encoder", "encoder_norm"}), count({"decoder", "decoder_norm"})


def update_flops(model: Seq2SeqBase, src_lens: np.ndarray, tgt_lens: np.ndarray) -> float:
    """Model FLOPs of one update (forward and backward) on sentences of these real lengths (B,),
    EOS / BOS included: with s_i, t_i the lengths, D d_model, V the target vocabulary, L_e and L_d
    the layers, P_enc and P_dec the encoder's and decoder's non-embedding parameters,

        matmuls     6 * (P_enc * sum s_i + (P_dec + V * D) * sum t_i)
        attention  12 * D * (L_e * sum s_i^2 + L_d * sum (t_i^2 + t_i * s_i))

    6 = 2 FLOPs a multiply-add x 3 (the forward, and the backward's two products); the output
    projection counts V * D per target token, tied or not; embedding lookups count nothing; the
    causal self-attention is counted over all t_i^2 pairs, as PaLM counts it."""
    cfg = model.cfg
    if cfg.arch != "encoder_decoder":
        raise ValueError("the FLOPs formula here is the encoder-decoder's")
    s, t = np.asarray(src_lens, dtype=np.float64), np.asarray(tgt_lens, dtype=np.float64)
    p_enc, p_dec = non_embedding_parameters(model)
    vocab = model.out_weight.size(0)
    matmuls = 6.0 * (p_enc * s.sum() + (p_dec + vocab * cfg.d_model) * t.sum())
    pairs = cfg.n_encoder_layers * (s * s).sum() + cfg.n_decoder_layers * (t * t + t * s).sum()
    return matmuls + 12.0 * cfg.d_model * pairs


# --- the update's matrix products, and the matmul peak at their shapes (CPU) ---


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


def gemm_flops(cfg: P.ModelParams, vocab: int, batch: int, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one whole update (forward and backward) on rows of these lengths, no padding."""
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
