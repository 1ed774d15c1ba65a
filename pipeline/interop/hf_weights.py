"""Our encoder-decoder's weights under transformers' Marian / Pegasus names, both ways.

One table (`layer_pairs`) says which of their tensors make up each of ours: our fused
self-attention QKV is their q_proj, k_proj, v_proj stacked, our cross-attention KV their
k_proj, v_proj. `to_hf` and `from_hf` both read it, so import and export cannot drift apart.
Marian and Pegasus name every layer alike; Pegasus (pre-LN) adds each stack's final
LayerNorm. Embeddings, the output projection and the id order are the importer's and
exporter's business (docs/huggingface.md). No transformers import here.
"""

from __future__ import annotations

import torch

from pipeline.params import ModelParams

# our sublayer index -> their LayerNorm, per stack
_ENCODER_NORMS = ("self_attn_layer_norm", "final_layer_norm")
_DECODER_NORMS = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")


def _attention(ours: str, theirs: str, self_attention: bool) -> list[tuple[str, list[str]]]:
    fused = ("qkv", ["q_proj", "k_proj", "v_proj"]) if self_attention else ("kv", ["k_proj", "v_proj"])
    parts = [fused] + ([] if self_attention else [("q", ["q_proj"])]) + [("out", ["out_proj"])]
    return [
        (f"{ours}.{name}.{kind}", [f"{theirs}.{p}.{kind}" for p in projections])
        for name, projections in parts
        for kind in ("weight", "bias")
    ]


def _layer(ours: str, theirs: str, decoder: bool) -> list[tuple[str, list[str]]]:
    pairs = _attention(f"{ours}.self_attn", f"{theirs}.self_attn", True)
    if decoder:
        pairs += _attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn", False)
    pairs += [
        (f"{ours}.ffn.{a}.{k}", [f"{theirs}.{b}.{k}"])
        for a, b in (("up", "fc1"), ("down", "fc2"))
        for k in ("weight", "bias")
    ]
    norms = _DECODER_NORMS if decoder else _ENCODER_NORMS
    pairs += [
        (f"{ours}.sub.{i}.norm.{k}", [f"{theirs}.{n}.{k}"])
        for i, n in enumerate(norms)
        for k in ("weight", "bias")
    ]
    return pairs


def layer_pairs(cfg: ModelParams) -> list[tuple[str, list[str]]]:
    """(our key, their keys stacked along dim 0 to make it), for every tensor but the embeddings."""
    pairs = []
    for i in range(cfg.n_encoder_layers):
        pairs += _layer(f"encoder.{i}", f"model.encoder.layers.{i}", decoder=False)
    for i in range(cfg.n_decoder_layers):
        pairs += _layer(f"decoder.{i}", f"model.decoder.layers.{i}", decoder=True)
    if cfg.norm == "pre":  # Pegasus: each stack ends in a LayerNorm, as ours does
        for stack in ("encoder", "decoder"):
            pairs += [(f"{stack}_norm.{k}", [f"model.{stack}.layer_norm.{k}"]) for k in ("weight", "bias")]
    return pairs


def to_hf(state: dict[str, torch.Tensor], cfg: ModelParams) -> dict[str, torch.Tensor]:
    """Our layers' tensors under their names (embeddings and output left out)."""
    out = {}
    for ours, theirs in layer_pairs(cfg):
        for name, part in zip(theirs, state[ours].chunk(len(theirs), dim=0)):
            out[name] = part.contiguous()
    return out


def from_hf(state: dict[str, torch.Tensor], cfg: ModelParams) -> dict[str, torch.Tensor]:
    """Their layers' tensors under our names; KeyError names the first tensor missing."""
    return {ours: torch.cat([state[name] for name in theirs], dim=0) for ours, theirs in layer_pairs(cfg)}


# Which axis of each kind of tensor runs along the residual stream (D): LayerNorms and the
# outputs of out_proj / fc2 along 0, the inputs of every projection and the embeddings along 1.
_ALONG_ROWS = (
    "layer_norm.weight",
    "layer_norm.bias",
    "out_proj.weight",
    "out_proj.bias",
    "fc2.weight",
    "fc2.bias",
)
_ALONG_COLUMNS = (
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "fc1.weight",
    "shared.weight",
    "embed_tokens.weight",
    "lm_head.weight",
)


def interleaved_to_halves(d_model: int) -> torch.Tensor:
    """The order of our residual dimensions that turns our interleaved sin/cos positions into
    Marian's halves: dims 0, 2, 4, ... (the sines), then 1, 3, 5, ... (the cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_residual(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same function with the residual stream's dimensions reordered (HF names).

    LayerNorm, attention and the FFN are equivariant to a permutation of D: reorder every
    tensor's D axis and each hidden state comes out reordered, the logits unchanged.
    """
    out = {}
    for name, t in state.items():
        if name.endswith(_ALONG_ROWS):
            t = t.index_select(0, order)
        elif name.endswith(_ALONG_COLUMNS):
            t = t.index_select(1, order)
        out[name] = t.contiguous()
    return out
