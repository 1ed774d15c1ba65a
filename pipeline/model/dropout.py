"""Dropout whose mask costs a quarter of torch's on CPU.

torch's CPU dropout draws one Bernoulli sample per element through
`bernoulli_`, which on a small CPU costs more than the layer's matmuls in bf16
(docs/cpu-speed.md). This draws 16 random bits per
element, four elements from each 64-bit word of torch's own generator, and
keeps an element when its bits clear a threshold: the drop probability is p
rounded to a multiple of 2^-16 (0.1 becomes 0.1000061), and kept elements
are scaled by exactly 1 / (1 - p), as torch does. Seeding, and saving and
restoring the RNG state for exact resume, work as for any torch sampling.

On other devices torch's fused dropout is already cheap and is used as it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """A bool tensor of `shape`, each element True with probability 1 - p (p in steps of 2^-16)."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
    bits = words.view(torch.int16)[:n].view(shape)  # uniform on [-2^15, 2^15)
    return bits >= round(p * _LEVELS) - _LEVELS // 2


@torch.library.custom_op("pipeline::keep_mask_like", mutates_args=())
def keep_mask_like(x: torch.Tensor, p: float) -> torch.Tensor:
    """keep_mask of x's shape, as one opaque op: torch.compile keeps it whole (no graph break on
    the in-place draw) and draws from the same generator, so compiled and eager masks are equal."""
    return keep_mask(x.shape, p, x.device)


@keep_mask_like.register_fake
def _(x: torch.Tensor, p: float) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.bool)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout(x, p, training), with a cheaper mask on CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p == 1.0:
        return F.dropout(x, p, training)
    keep, scale = keep_mask_like(x, p), 1.0 / (1.0 - p)
    if x.dtype == torch.float32:
        # One float32 multiplier (scale or 0): the backward pass is then a single product.
        return x * torch.where(keep, scale, 0.0)
    return torch.where(keep, x * scale, 0.0)  # a bf16 multiplier would round the scale


class Dropout(nn.Module):
    """nn.Dropout on `dropout` above."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
