"""bench/flops.py: PaLM's formula for an update's FLOPs, against torch's own FLOP counter on a real update."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import flops
from bench.flops import non_embedding_parameters, peak_flops, update_flops
from pipeline.model.transformer import build_model, count_parameters
from tests.support.repo import BASE


@pytest.mark.parametrize(("layers", "vocab", "tie"), [((3, 2), 100, "all"), ((1, 4), 257, "none")])
def test_update_flops_are_torchs_counted_products_plus_biases_and_norms(layers, vocab: int, tie: str) -> None:
    cfg = dataclasses.replace(
        BASE.model,
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_layers=None,
        encoder_layers=layers[0],
        decoder_layers=layers[1],
        tie_embeddings=tie,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_positions=64,
    )
    batch, src_len, tgt_len = 4, 7, 5
    torch.manual_seed(0)
    model = build_model(cfg, vocab, vocab)
    src = torch.randint(4, vocab, (batch, src_len))
    tgt = torch.randint(4, vocab, (batch, tgt_len + 1))  # no PAD: every target token is scored
    with FlopCounterMode(display=False) as counter:
        model(src, tgt[:, :-1], tgt[:, 1:], 0.1).backward()
    # The fused loss accumulates the output projection's weight gradient with an in-place addmm_,
    # which the counter does not see: one (V x N) by (N x D) product.
    unseen = 2 * vocab * batch * tgt_len * cfg.d_model
    by_formula = flops.update_flops(model, np.full(batch, src_len), np.full(batch, tgt_len))
    # The formula counts 6 FLOPs for every non-embedding parameter, biases and norms too, which
    # are no matrix products: that, and only that, is the difference.
    on_source = lambda name: name.startswith("encoder") or ".cross_attn.kv." in name
    biases_and_norms = sum(
        p.numel() * (src_len if on_source(name) else tgt_len) * batch * 6
        for name, p in model.named_parameters()
        if name.split(".")[0] in {"encoder", "encoder_norm", "decoder", "decoder_norm"} and p.dim() == 1
    )
    assert counter.get_total_flops() + unseen == by_formula - biases_and_norms


def test_a_decoder_only_model_is_refused_rather_than_miscounted() -> None:
    model = build_model(dataclasses.replace(BASE.model, arch="decoder_only"), 100, 100)
    with pytest.raises(ValueError, match="encoder-decoder's"):
        flops.update_flops(model, np.full(2, 3), np.full(2, 3))


def test_the_flops_formula_counts_every_non_embedding_parameter_and_attention_pair():
    cfg = dataclasses.replace(BASE.model, d_model=8, n_heads=2, d_ff=16, n_layers=1, tie_embeddings="all")
    model = build_model(cfg, 10, 10)
    src, tgt = [3, 5], [2, 4]
    p_embedding = 10 * 8  # one shared table; sinusoidal positions are no parameter
    p_layers = count_parameters(model) - p_embedding
    p_enc, p_dec, p_kv = non_embedding_parameters(model)
    assert p_enc + p_dec == p_layers and p_enc < p_dec  # the decoder has cross-attention too
    assert p_kv == 2 * 8 * 8 + 2 * 8  # one layer's key and value projections, weights and biases
    matmuls = 6 * ((p_enc + p_kv) * 8 + (p_dec - p_kv + 10 * 8) * 6)
    attention = 12 * 8 * ((9 + 25) + (4 + 16 + 2 * 3 + 4 * 5))
    assert update_flops(model, src, tgt) == matmuls + attention


@pytest.mark.parametrize(
    "name,precision,tf32,tflops",
    [
        ("NVIDIA H200", "bf16", False, 989.0),
        ("NVIDIA H200", "fp32", False, 67.0),
        ("NVIDIA H200", "fp32", True, 494.5),
        ("NVIDIA H100 80GB HBM3", "fp16", False, 989.0),
        ("NVIDIA H100 PCIe", "bf16", False, 756.0),
        ("NVIDIA L40S", "bf16", False, 362.0),  # not the L4's row
        ("NVIDIA L4", "bf16", False, 121.0),
        ("NVIDIA A100-SXM4-80GB", "fp32", False, 19.5),
        ("Tesla T4", "bf16", False, None),
    ],
)
def test_the_peak_table(name, precision, tf32, tflops):
    peak = peak_flops(name, precision, tf32)
    assert (peak is None) if tflops is None else peak == pytest.approx(tflops * 1e12)
