"""bench/flops.py: PaLM's formula for an update's FLOPs, against torch's own FLOP counter on a real update."""

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
    # Equal lengths: the formula counts cross-attention's key and value projections per target
    # token, where the model runs them per source token.
    batch, src_len, tgt_len = 4, 6, 6
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
    biases_and_norms = sum(
        p.numel() * (src_len if name.startswith("encoder") else tgt_len) * batch * 6
        for name, p in model.named_parameters()
        if name.split(".")[0] in {"encoder", "encoder_norm", "decoder", "decoder_norm"} and p.dim() == 1
    )
    assert counter.get_total_flops() + unseen == by_formula - biases_and_norms


def test_a_decoder_only_model_is_refused_rather_than_miscounted() -> None:
    model = build_model(dataclasses.replace(BASE.model, arch="decoder_only"), 100, 100)
    with pytest.raises(ValueError, match="encoder-decoder's"):
        flops.update_flops(model, np.full(2, 3), np.full(2, 3))
