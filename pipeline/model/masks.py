"""Attention masks: the one convention, stated once.

Every mask is boolean and True means "may attend" (the query may look at that
key), which is what torch's scaled_dot_product_attention takes as attn_mask.
Masks broadcast to (B, H, Lq, Lk). Shapes: docs/shapes.md (L a whole sequence).
"""

import torch

from pipeline.tokens import PAD


def padding_mask(tokens: torch.Tensor) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L): True at real tokens, False at padding (as keys)."""
    return (tokens != PAD)[:, None, None, :]


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """(1, 1, L, L): True where key position <= query position."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def causal_padding_mask(keep: torch.Tensor) -> torch.Tensor:
    """(B, L) bool of real tokens -> (B, 1, L, L): causal, and padding keys masked.

    For a decoder-only model, whose source padding sits in the middle of the
    sequence; the encoder-decoder's target needs causality alone, because its
    padding is on the right, behind every real query.
    """
    return causal_mask(keep.size(1), keep.device) & keep[:, None, None, :]
