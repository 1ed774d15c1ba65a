"""The name table between our weights and transformers' Marian/Pegasus, and the residual reordering."""

from __future__ import annotations

import pytest
import torch

from pipeline.interop import hf_weights
from pipeline.model.transformer import build_model
from tests.support.models import tiny_model_params

EMBEDDINGS = {"src_embed.tokens.weight", "tgt_embed.tokens.weight", "out_weight", "out_bias"}


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_table_covers_every_layer_tensor_and_round_trips_exactly(norm: str) -> None:
    cfg = tiny_model_params(norm=norm, output_bias=True, decoder_layers=1)
    state = build_model(cfg, 20, 20).state_dict()
    layers = {k: v for k, v in state.items() if k not in EMBEDDINGS}
    assert {ours for ours, _ in hf_weights.layer_pairs(cfg)} == set(layers)
    theirs = hf_weights.to_hf(layers, cfg)
    assert theirs["model.decoder.layers.0.encoder_attn.k_proj.weight"].shape == (32, 32)
    assert ("model.encoder.layer_norm.weight" in theirs) == (norm == "pre")  # Pegasus' final norms
    back = hf_weights.from_hf(theirs, cfg)
    assert back.keys() == layers.keys() and all(torch.equal(back[k], layers[k]) for k in layers)


def test_the_reordering_puts_the_sines_first_and_undoes_itself() -> None:
    order = hf_weights.interleaved_to_halves(8)
    assert order.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    state = {"model.shared.weight": torch.arange(16.0).view(2, 8), "x.fc2.bias": torch.arange(8.0)}
    moved = hf_weights.permute_residual(state, order)
    assert moved["model.shared.weight"][0].tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert moved["x.fc2.bias"].tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    undone = hf_weights.permute_residual(moved, torch.argsort(order))
    assert all(torch.equal(undone[k], state[k]) for k in state)
