"""Model FLOPs of an encoder-decoder update, and the GPU peak to measure them against (MFU).

MFU = model FLOP/s achieved / the peak dense FLOP/s at the precision of the matmuls, as in PaLM
(Chowdhery et al. 2022, appendix B): `update_flops` by PaLM's formula on real (non-PAD) lengths (the
tests check it against torch's FLOP counter on a real update), `peak_flops` the datasheet's peak.
"""

from __future__ import annotations

import re

import numpy as np
from torch import nn

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


def non_embedding_parameters(model: nn.Module) -> tuple[int, int, int]:
    """(P_enc, P_dec, P_kv) of an encoder-decoder Transformer: its layers' and final norms'
    parameters, and of the decoder's those of cross-attention's key and value projections."""
    count = lambda keep: sum(p.numel() for name, p in model.named_parameters() if keep(name.split(".")))
    return (
        count(lambda n: n[0] in {"encoder", "encoder_norm"}),
        count(lambda n: n[0] in {"decoder", "decoder_norm"}),
        count(lambda n: n[0] == "decoder" and n[2:4] == ["cross_attn", "kv"]),
    )


def update_flops(model: Seq2SeqBase, src_lens: np.ndarray, tgt_lens: np.ndarray) -> float:
    """Model FLOPs of one update (forward and backward) on sentences of these real lengths (B,),
    EOS / BOS included: with s_i, t_i the lengths, D d_model, V the target vocabulary, L_e and L_d
    the layers, P_enc, P_dec and P_kv as non_embedding_parameters counts them (the key and value
    projections of cross-attention run on the source),

        matmuls     6 * ((P_enc + P_kv) * sum s_i + (P_dec - P_kv + V * D) * sum t_i)
        attention  12 * D * (L_e * sum s_i^2 + L_d * sum (t_i^2 + t_i * s_i))

    6 = 2 FLOPs a multiply-add x 3 (the forward, and the backward's two products); the output
    projection counts V * D per target token, tied or not; embedding lookups count nothing; the
    causal self-attention is counted over all t_i^2 pairs, as PaLM counts it."""
    cfg = model.cfg
    if cfg.arch != "encoder_decoder":
        raise ValueError("the FLOPs formula here is the encoder-decoder's")
    s, t = np.asarray(src_lens, dtype=np.float64), np.asarray(tgt_lens, dtype=np.float64)
    p_enc, p_dec, p_kv = non_embedding_parameters(model)
    vocab = model.out_weight.size(0)
    matmuls = 6.0 * ((p_enc + p_kv) * s.sum() + (p_dec - p_kv + vocab * cfg.d_model) * t.sum())
    pairs = cfg.n_encoder_layers * (s * s).sum() + cfg.n_decoder_layers * (t * t + t * s).sum()
    return matmuls + 12.0 * cfg.d_model * pairs
