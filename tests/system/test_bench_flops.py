"""bench/flops.py: the update's matmul FLOPs, against torch's own FLOP counter and PaLM's formula."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import flops
from pipeline.model.transformer import build_model
from tests.support.repo import BASE


@pytest.mark.parametrize(("layers", "vocab", "tie"), [((3, 2), 100, "all"), ((1, 4), 257, "none")])
def test_update_flops_are_the_products_torch_counts_in_a_real_update(layers, vocab: int, tie: str) -> None:
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
    assert counter.get_total_flops() + unseen == flops.gemm_flops(cfg, vocab, batch, src_len, tgt_len)


def test_the_backward_products_are_the_two_transposed_shapes() -> None:
    g = flops.Gemm(5, 7, 3, batch=2, count=4)
    dx, dw = g.backward()
    assert (dx.m, dx.n, dx.k) == (5, 3, 7) and (dw.m, dw.n, dw.k) == (3, 7, 5)
    assert g.flops == dx.flops == dw.flops == 2 * 5 * 7 * 3 * 2 * 4


def test_a_decoder_only_model_is_refused_rather_than_miscounted() -> None:
    cfg = dataclasses.replace(BASE.model, arch="decoder_only")
    with pytest.raises(ValueError, match="encoder-decoder only"):
        flops.forward_gemms(cfg, 100, 2, 3, 3)


def test_palms_formula_and_the_product_count_agree_on_the_default_model() -> None:
    """update_flops (gpu_check's, by formula on real lengths) and gemm_flops (train_speed's, product
    by product) count the same work; they differ only by the biases and norms the formula counts."""
    cfg = BASE.model
    model = build_model(cfg, 8000, 8000)
    batch, length = 128, 16
    by_formula = flops.update_flops(model, np.full(batch, length), np.full(batch, length))
    by_products = flops.gemm_flops(cfg, 8000, batch, length, length)
    assert by_products == pytest.approx(by_formula, rel=0.01)
