"""Multi-head attention with a key/value cache.

On GPU, attention runs in `F.scaled_dot_product_attention` (flash and
memory-efficient kernels). On CPU it is computed explicitly: torch's CPU
flash kernel was slower at this project's shapes (docs/cpu-speed.md), and with
dropout it falls back to the same math anyway, with a costlier mask than
pipeline/model/dropout.py's. Weights asked for (`record` set, see
`Seq2SeqBase.recording_attention`) come from the explicit computation.

During beam search the beams of a sentence share its cross-attention keys and
values: the cache holds one row per sentence and the queries of its beams are
attended together (`group` below), never copying the encoder's keys per beam.

Shapes (docs/shapes.md): B rows, Lq query and Lk key length, D, H, Dh = D / H.
Masks follow pipeline/model/masks.py: boolean, True = may attend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.model.dropout import dropout
from pipeline.model.linear import Linear


@dataclass
class KVCache:
    """Keys and values of one attention module during incremental decoding.

    Cross-attention computes them once from the encoder output and keeps them.
    Self-attention appends each step's positions in place into buffers with
    room for at least `capacity` positions (twice what is needed when they
    fill up), and `k`, `v` are views of their filled part. torch.cat of the
    whole cache every step copied it into a new tensor, a cost that grew with
    every step (docs/cpu-speed.md). The in-place writes make the cache for
    inference only: autograd refuses a backward pass through several steps.
    """

    k: torch.Tensor | None = None  # (B, H, Lk, Dh)
    v: torch.Tensor | None = None  # (B, H, Lk, Dh)
    capacity: int = 0  # positions the self-attention buffers are first sized for (at least)
    buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, H, room, Dh) each

    def kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values, once there are any (both are always set together)."""
        assert self.k is not None and self.v is not None, "nothing cached yet"
        return self.k, self.v

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Self-attention: add Lq new positions (B, H, Lq, Dh) after those cached."""
        n = 0 if self.k is None else self.k.size(2)
        end = n + k.size(2)
        if self.buffers is None or end > self.buffers[0].size(2):
            B, H, _, Dh = k.shape
            room = max(self.capacity, end if self.buffers is None else 2 * end)
            self.buffers = (k.new_empty(B, H, room, Dh), v.new_empty(B, H, room, Dh))
            if n:
                cached_k, cached_v = self.kv()
                self.buffers[0][:, :, :n] = cached_k
                self.buffers[1][:, :, :n] = cached_v
        kb, vb = self.buffers
        kb[:, :, n:end] = k
        vb[:, :, n:end] = v
        self.k, self.v = kb[:, :, :end], vb[:, :, :end]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (B',): beam search's survivors, in order."""
        if self.buffers is not None:  # into new buffers of the same room, the filled part only
            k, v = self.kv()  # buffers exist only once append has filled some of them
            n = k.size(2)
            new_k, new_v = (x.new_empty(index.size(0), *x.shape[1:]) for x in self.buffers)
            for old, buffer in zip((k, v), (new_k, new_v)):
                if old.requires_grad:  # out= has no autograd
                    buffer[:, :, :n] = old.index_select(0, index)
                else:
                    torch.index_select(old, 0, index, out=buffer[:, :, :n])
            self.buffers = (new_k, new_v)
            self.k, self.v = new_k[:, :, :n], new_v[:, :, :n]
        elif self.k is not None:
            k, v = self.kv()
            self.k = k.index_select(0, index)
            self.v = v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Self-attention (one fused QKV projection) or cross-attention (Q, and fused KV)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, self_attention: bool):
        super().__init__()
        self.h, self.d_head = n_heads, d_model // n_heads
        self.self_attention = self_attention
        if self_attention:
            self.qkv = Linear(d_model, 3 * d_model)
        else:
            self.q = Linear(d_model, d_model)
            self.kv = Linear(d_model, 2 * d_model)
        self.out = Linear(d_model, d_model)
        self.dropout = dropout
        self.record: list[torch.Tensor] | None = None  # set to a list to collect weights

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_head).transpose(1, 2)  # (B, H, L, Dh)

    def _project(
        self, x: torch.Tensor, memory: torch.Tensor | None, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values (B, H, *, Dh), extending or reusing the cache."""
        if self.self_attention:
            q, k, v = map(self._split, self.qkv(x).chunk(3, dim=-1))
            if cache is not None:
                cache.append(k, v)
                k, v = cache.kv()  # (B, H, Lk, Dh): those cached, then the Lq new
            return q, k, v
        q = self._split(self.q(x))
        if cache is not None and cache.k is not None:
            k, v = cache.kv()
            return q, k, v
        assert memory is not None, "cross-attention without cached keys needs memory"
        k, v = self.memory_kv(memory)
        if cache is not None:
            cache.k, cache.v = k, v
        return q, k, v

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of memory (B, S, D): (B, H, S, Dh) each, contiguous.

        Head-split views of the fused projection would be copied by every matmul that
        reads them: once in training anyway, but at every decoding step from a cache.
        """
        k, v = self.kv(memory).chunk(2, dim=-1)
        return self._split(k).contiguous(), self._split(v).contiguous()

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        memory: torch.Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, Lq, D), memory (B', S, D) for cross-attention, mask (B|B'|1, 1, Lq|1, Lk) -> (B, Lq, D).

        `causal` asks for a lower-triangular mask over a fresh (uncached) sequence;
        it is not combined with `mask`. Cached cross-attention keys of B' = B / g
        sentences serve g consecutive query rows each (a sentence's beams).
        """
        q, k, v = self._project(x, memory, cache)
        B, H, Lq, Dh = q.shape
        group = B // k.size(0)
        if group > 1:  # (B, H, Lq, Dh) -> (B', H, g*Lq, Dh): a sentence's beams as one query block
            q = q.view(-1, group, H, Lq, Dh).transpose(1, 2).reshape(-1, H, group * Lq, Dh)
        p = self.dropout if self.training else 0.0
        if self.record is not None or q.device.type == "cpu":
            if causal:
                mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
            y, weights = attention_with_weights(q, k, v, mask, p)
            if self.record is not None:
                self.record.append(_ungroup(weights.detach(), group, B))
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        y = _ungroup(y, group, B)  # (B, H, Lq, Dh)
        return self.out(y.transpose(1, 2).reshape(B, Lq, H * Dh))  # (B, Lq, D)


def _ungroup(x: torch.Tensor, group: int, rows: int) -> torch.Tensor:
    """(B', H, g*Lq, E) -> (B, H, Lq, E), B = rows = B' * g: undo the query grouping above."""
    if group == 1:
        return x
    _, H, gLq, E = x.shape
    return x.view(-1, H, group, gLq // group, E).transpose(1, 2).reshape(rows, H, gLq // group, E)


def attention_with_weights(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """dropout(softmax(q k^T / sqrt(Dh))) v, explicitly: -> (B, H, Lq, Dh) and the weights
    (B, H, Lq, Lk) before dropout."""
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return dropout(weights, dropout_p, training=dropout_p > 0.0) @ v, weights
