"""The Transformer (Vaswani et al. 2017), and a decoder-only variant, as settings of one model.

Read bottom-up: embeddings and positions, the residual sublayer (pre- or
post-LN), the feed-forward block, the layers, then the two models and
`build_model`, the one place a model is assembled from params.

Shapes: docs/shapes.md (B, S, T, L, D, V; R decoding rows). Masks follow
pipeline/model/masks.py (True = may attend).

Initialization, as fairseq and the tensor2tensor reference do it: every
projection xavier-uniform (each of the fused Q, K, V blocks on its own) with
zero bias; embeddings N(0, D^-0.5), so that scaled by sqrt(D) they start at
unit scale; the padding row zero. LayerNorms start as the identity.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.model.attention import KVCache, MultiHeadAttention
from pipeline.model.dropout import Dropout
from pipeline.model.linear import Linear, linear
from pipeline.model.lookup import lookup
from pipeline.model.loss import projected_loss
from pipeline.model.masks import causal_padding_mask, padding_mask
from pipeline.params import ModelParams
from pipeline.tokens import BOS, PAD, SEP

# --- embeddings and positions -------------------------------------------------------


class SinusoidalPositions(nn.Module):
    """Fixed sin/cos position encodings (section 3.5); any length."""

    table: torch.Tensor  # (n, D), a buffer

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", self._table(max_positions), persistent=False)

    def _table(self, n: int) -> torch.Tensor:
        pos = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
        freq = torch.exp(torch.arange(0, self.d_model, 2) * (-math.log(10000.0) / self.d_model))
        table = torch.zeros(n, self.d_model)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq[: self.d_model // 2])
        return table  # (n, D)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (...) int -> (..., D)."""
        if torch.compiler.is_compiling():
            # A compiled graph has no data-dependent branch: training keeps to max_positions.
            return self.table[positions]
        needed = int(positions.max()) + 1 if positions.numel() else 0
        table = self.table  # one read: decoding workers may grow it at the same time
        if needed > table.size(0):
            table = self._table(needed).to(table)  # keeps device and dtype
            if table.size(0) > self.table.size(0):
                self.table = table
        return table[positions]


class MarianSinusoidalPositions(SinusoidalPositions):
    """The same frequencies laid out as Marian's (and tensor2tensor's): sin in the first half of the
    dimensions, cos in the second. Computed in float64 and rounded once, as transformers' Marian
    computes it, so that an imported OPUS-MT model sees the very table it was trained with."""

    def _table(self, n: int) -> torch.Tensor:
        pos = torch.arange(n, dtype=torch.float64)[:, None]  # (n, 1)
        half = (self.d_model + 1) // 2
        angle = pos / 10000.0 ** (torch.arange(half, dtype=torch.float64) * 2 / self.d_model)  # (n, D/2)
        return torch.cat([angle.sin(), angle[:, : self.d_model // 2].cos()], dim=1).float()  # (n, D)


class LearnedPositions(nn.Module):
    """A trained table of max_positions rows; refuses longer sequences."""

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (...) int -> (..., D)."""
        if positions.numel() and int(positions.max()) >= self.table.num_embeddings:
            raise ValueError(
                f"a sequence of {int(positions.max()) + 1} positions exceeds the learned position table "
                f"(model.max_positions={self.table.num_embeddings}); raise model.max_positions or "
                "shorten the input"
            )
        return lookup(self.table, positions)


class Embedder(nn.Module):
    """Token embedding (optionally shared), scaled by sqrt(D), plus positions, then dropout."""

    def __init__(self, tokens: nn.Embedding, cfg: ModelParams):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        positions = {
            "sinusoidal": SinusoidalPositions,
            "sinusoidal_marian": MarianSinusoidalPositions,
            "learned": LearnedPositions,
        }[cfg.positions]
        self.positions = positions(cfg.d_model, cfg.max_positions)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """ids (B, L), positions (B, L) or (L,) -> (B, L, D)."""
        return self.dropout(lookup(self.tokens, ids) * self.scale + self.positions(positions))


# --- layers -----------------------------------------------------------------------


class Residual(nn.Module):
    """A sublayer with its residual connection and LayerNorm, pre-LN or post-LN (the paper's)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class FeedForward(nn.Module):
    """Position-wise FFN: D -> d_ff -> D."""

    def __init__(self, cfg: ModelParams):
        super().__init__()
        self.up = Linear(cfg.d_model, cfg.d_ff)
        self.down = Linear(cfg.d_ff, cfg.d_model)
        self.activation = cfg.activation
        self.dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation == "relu":
            # ReLU inside the up-projection (oneDNN's epilogue on CPU float32, else in place).
            h = linear(x, self.up.weight, self.up.bias, relu=True)
        else:
            h = F.gelu(self.up(x)) if self.activation == "gelu" else F.silu(self.up(x))
        return self.down(self.dropout(h))


class EncoderLayer(nn.Module):
    """Bidirectional self-attention, then the FFN."""

    def __init__(self, cfg: ModelParams):
        super().__init__()
        d, h, p = cfg.d_model, cfg.n_heads, cfg.attention_dropout
        self.self_attn = MultiHeadAttention(d, h, p, self_attention=True)
        self.ffn = FeedForward(cfg)
        pre = cfg.norm == "pre"
        self.sub = nn.ModuleList(Residual(d, cfg.dropout, pre) for _ in range(2))

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D)."""
        x = self.sub[0](x, lambda y: self.self_attn(y, mask=src_mask))
        return self.sub[1](x, self.ffn)


@dataclass
class LayerCache:
    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)

    @classmethod
    def sized(cls, positions: int) -> LayerCache:
        """Self-attention buffers first sized for `positions` (more still fit)."""
        return cls(self_attn=KVCache(capacity=positions))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention on the encoder output, then the FFN.

    Without cross-attention it is a GPT-style block, the decoder-only model's layer.
    """

    def __init__(self, cfg: ModelParams, cross_attention: bool = True):
        super().__init__()
        d, h, p = cfg.d_model, cfg.n_heads, cfg.attention_dropout
        self.self_attn = MultiHeadAttention(d, h, p, self_attention=True)
        self.cross_attn = MultiHeadAttention(d, h, p, self_attention=False) if cross_attention else None
        self.ffn = FeedForward(cfg)
        pre = cfg.norm == "pre"
        self.sub = nn.ModuleList(Residual(d, cfg.dropout, pre) for _ in range(3 if cross_attention else 2))

    def forward(
        self,
        x: torch.Tensor,
        self_mask: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x (B, T, D), memory (B, S, D), memory_mask (B, 1, 1, S) -> (B, T, D).

        self_mask None means plain causal attention over x (no cache, no padding
        before a real token); with a cache, T is the new positions only.
        """
        causal = self_mask is None and cache is None
        self_cache = cache.self_attn if cache else None
        x = self.sub[0](x, lambda y: self.self_attn(y, mask=self_mask, causal=causal, cache=self_cache))
        if self.cross_attn is not None:
            cross_cache = cache.cross_attn if cache else None
            x = self.sub[1](
                x, lambda y: self.cross_attn(y, mask=memory_mask, memory=memory, cache=cross_cache)
            )
        return self.sub[-1](x, self.ffn)


# --- incremental decoding state ---------------------------------------------------------


@dataclass
class DecoderState:
    """What a model carries from one decoding step to the next.

    Rows are sentences x beams (R = B x K, a sentence's beams adjacent). What
    depends on the sentence alone, the cross-attention keys and values and the
    source mask, is kept once per sentence and shared by its beams.
    """

    caches: list[LayerCache]
    positions: torch.Tensor  # (R,) position of the next token
    memory_mask: torch.Tensor | None = None  # (B, 1, 1, S), encoder-decoder
    keep: torch.Tensor | None = None  # (R, L) real tokens so far, decoder-only
    beams: int = 1  # rows per sentence

    def reorder(self, index: torch.Tensor, beams: int | None = None) -> None:
        """Keep rows `index` (R',) in that order, `beams` rows per sentence from now on (default: as
        before): expands sentences to beams, follows survivors, drops finished sentences.

        Each group of `beams` consecutive entries must come from one sentence, the
        sentences in order (as beam search's selections do).
        """
        beams = self.beams if beams is None else beams
        n_sentences = self.positions.size(0) // self.beams
        sentences = index[::beams] // self.beams  # (B',)
        if not torch.equal(sentences, torch.arange(n_sentences, device=index.device)):
            for cache in self.caches:
                cache.cross_attn.reorder(sentences)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, sentences)
        if not torch.equal(index, torch.arange(self.positions.size(0), device=index.device)):
            for cache in self.caches:
                cache.self_attn.reorder(index)
            self.positions = self.positions.index_select(0, index)
            if self.keep is not None:
                self.keep = self.keep.index_select(0, index)
        self.beams = beams


# --- the models ---------------------------------------------------------------------


class Seq2SeqBase(nn.Module):
    """What both architectures share: the output projection, and the decoding interface.

    forward(src (B, S), tgt_in (B, T)) -> logits (B, T, V)   teacher forcing
    forward(src, tgt_in, target (B, T), smoothing) -> loss   summed over non-PAD targets, fused
    start(src (B, S), steps) -> DecoderState                 before the first step (steps: how many
                                                             are expected, to size the cache; more fit)
    step(tokens (R, 1), state) -> logits (R, V)               one position, cached
    start_token: the id fed at the first step
    """

    start_token = BOS
    cfg: ModelParams

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> hidden states (B, T, D), before the projection."""
        raise NotImplementedError

    def start(self, src: torch.Tensor, steps: int = 0) -> DecoderState:
        raise NotImplementedError

    def step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        raise NotImplementedError

    def _init_output(self, cfg: ModelParams, tgt_embedding: nn.Embedding, tie: bool) -> None:
        vocab = tgt_embedding.num_embeddings
        self.out_weight = tgt_embedding.weight if tie else nn.Parameter(torch.empty(vocab, cfg.d_model))
        self.out_bias = nn.Parameter(torch.zeros(vocab)) if cfg.output_bias else None

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        target: torch.Tensor | None = None,
        smoothing: float = 0.0,
    ) -> torch.Tensor:
        """Logits (B, T, V); or, given `target` (B, T), the label-smoothed loss summed over its
        non-PAD tokens, computed by pipeline.model.loss.projected_loss without holding the logits."""
        h = self.features(src, tgt_in)  # (B, T, D)
        if target is None:
            return self.project(h)
        return projected_loss(h, self.out_weight, self.out_bias, target, smoothing)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., V) logits."""
        return linear(h, self.out_weight, self.out_bias)

    @contextlib.contextmanager
    def recording_attention(self) -> Iterator[dict[str, list[torch.Tensor]]]:
        """Collect attention weights (B, H, Lq, Lk), per module name and call, while inside."""
        records: dict[str, list[torch.Tensor]] = {}
        modules = [(n, m) for n, m in self.named_modules() if isinstance(m, MultiHeadAttention)]
        for name, module in modules:
            module.record = records.setdefault(name, [])
        try:
            yield records
        finally:
            for _, module in modules:
                module.record = None

    def reset_parameters(self) -> None:
        d_model = self.cfg.d_model
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                fused = module.qkv if module.self_attention else module.kv
                for block in fused.weight.chunk(fused.out_features // d_model):
                    nn.init.xavier_uniform_(block)
                if not module.self_attention:
                    nn.init.xavier_uniform_(module.q.weight)
                nn.init.xavier_uniform_(module.out.weight)
            elif isinstance(module, FeedForward):
                nn.init.xavier_uniform_(module.up.weight)
                nn.init.xavier_uniform_(module.down.weight)
            elif isinstance(module, LearnedPositions):
                nn.init.normal_(module.table.weight, std=d_model**-0.5)  # as fairseq
            elif isinstance(module, nn.Embedding) and module.padding_idx == PAD:
                nn.init.normal_(module.weight, std=d_model**-0.5)
                with torch.no_grad():
                    module.weight[PAD].zero_()
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        if not any(self.out_weight is m.weight for m in self.modules() if isinstance(m, nn.Embedding)):
            nn.init.normal_(self.out_weight, std=d_model**-0.5)


class Transformer(Seq2SeqBase):
    """The encoder-decoder of Vaswani et al. 2017, pre-LN or post-LN."""

    def __init__(self, cfg: ModelParams, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.cfg = cfg
        tgt_tokens = nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=PAD)
        shared = cfg.tie_embeddings == "all"
        src_tokens = tgt_tokens if shared else nn.Embedding(src_vocab, cfg.d_model, padding_idx=PAD)
        self.src_embed = Embedder(src_tokens, cfg)
        self.tgt_embed = Embedder(tgt_tokens, cfg)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        # pre-LN leaves the residual stream unnormalized: each stack ends in a LayerNorm.
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self._init_output(cfg, tgt_tokens, tie=cfg.tie_embeddings != "none")
        self.reset_parameters()

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, D), src_mask (B, 1, 1, S)."""
        src_mask = padding_mask(src)
        x = self.src_embed(src, torch.arange(src.size(1), device=src.device))
        for layer in self.encoder:
            x = layer(x, src_mask=src_mask)
        return self.encoder_norm(x), src_mask

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> the decoder's output (B, T, D), before the projection."""
        memory, src_mask = self.encode(src)
        x = self.tgt_embed(tgt_in, torch.arange(tgt_in.size(1), device=tgt_in.device))
        for layer in self.decoder:
            x = layer(x, self_mask=None, memory=memory, memory_mask=src_mask)
        return self.decoder_norm(x)

    def start(self, src: torch.Tensor, steps: int = 0) -> DecoderState:
        """Encode src (B, S) and compute each layer's cross-attention keys and values once;
        self-attention caches sized for `steps` steps."""
        memory, src_mask = self.encode(src)
        caches = [LayerCache.sized(steps) for _ in self.decoder]
        for layer, cache in zip(self.decoder, caches):
            cross_attn = layer.cross_attn
            assert isinstance(cross_attn, MultiHeadAttention)  # every encoder-decoder layer has one
            cache.cross_attn.k, cache.cross_attn.v = cross_attn.memory_kv(memory)
        positions = torch.zeros(src.size(0), dtype=torch.long, device=src.device)
        return DecoderState(caches, positions, memory_mask=src_mask)

    def step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """tokens (R, 1) -> logits (R, V) for the next position; extends the caches."""
        x = self.tgt_embed(tokens, state.positions[:, None])  # (R, 1, D)
        for layer, cache in zip(self.decoder, state.caches):
            x = layer(x, self_mask=None, memory_mask=state.memory_mask, cache=cache)
        state.positions = state.positions + 1
        return self.project(self.decoder_norm(x))[:, -1]


class DecoderOnly(Seq2SeqBase):
    """A causal Transformer LM (GPT-style blocks, fused QKV) over `source <sep> target`.

    Batches are right-padded per side, so the source padding sits inside the
    sequence: it is masked as keys, and positions count real tokens only, which
    keeps every output independent of how much padding a batch needed.
    """

    start_token = SEP

    def __init__(self, cfg: ModelParams, vocab: int):
        super().__init__()
        self.cfg = cfg
        tokens = nn.Embedding(vocab, cfg.d_model, padding_idx=PAD)
        self.embed = Embedder(tokens, cfg)
        layers = range(cfg.n_decoder_layers)
        self.blocks = nn.ModuleList(DecoderLayer(cfg, cross_attention=False) for _ in layers)
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self._init_output(cfg, tokens, tie=cfg.tie_embeddings != "none")
        self.reset_parameters()

    def _run(self, ids: torch.Tensor, keep: torch.Tensor, caches: list[LayerCache] | None) -> torch.Tensor:
        """ids (B, L), keep (B, L) -> hidden states (B, L, D)."""
        positions = (keep.long().cumsum(1) - 1).clamp(min=0)  # (B, L): padding does not advance
        x = self.embed(ids, positions)
        mask = causal_padding_mask(keep)
        for i, block in enumerate(self.blocks):
            x = block(x, self_mask=mask, cache=caches[i] if caches else None)
        return self.norm(x)

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) starting with BOS -> hidden states (B, T, D) of the target part."""
        ids = torch.cat([src, torch.full_like(tgt_in[:, :1], SEP), tgt_in[:, 1:]], dim=1)  # (B, S+T)
        return self._run(ids, ids != PAD, None)[:, src.size(1) :]

    def start(self, src: torch.Tensor, steps: int = 0) -> DecoderState:
        """Run the source prefix (B, S) through the blocks, filling the caches (sized for it and
        `steps` steps)."""
        caches = [LayerCache.sized(src.size(1) + steps) for _ in self.blocks]
        keep = src != PAD
        self._run(src, keep, caches)
        return DecoderState(caches, keep.long().sum(1), keep=keep)

    def step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """tokens (R, 1) -> logits (R, V) for the next position; extends the caches."""
        assert state.keep is not None, "DecoderOnly.start sets keep"
        state.keep = torch.cat([state.keep, torch.ones_like(tokens, dtype=torch.bool)], dim=1)  # (R, L+1)
        x = self.embed(tokens, state.positions[:, None])  # (R, 1, D)
        mask = state.keep[:, None, None, :]  # (R, 1, 1, L+1)
        for block, cache in zip(self.blocks, state.caches):
            x = block(x, self_mask=mask, cache=cache)
        state.positions = state.positions + 1
        return self.project(self.norm(x))[:, -1]


def build_model(cfg: ModelParams, src_vocab: int, tgt_vocab: int) -> Seq2SeqBase:
    """The one place a model is assembled from params."""
    if cfg.arch == "decoder_only":
        assert src_vocab == tgt_vocab, "params validation guarantees a joint vocabulary"
        return DecoderOnly(cfg, tgt_vocab)
    if cfg.tie_embeddings == "all" and src_vocab != tgt_vocab:
        raise ValueError("tie_embeddings 'all' needs one joint vocabulary")
    return Transformer(cfg, src_vocab, tgt_vocab)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
