"""Label-smoothed cross-entropy, plain and fused with the output projection.

The loss of one target token with logits x (V,) and reference t is

    (1 - eps) * (lse(x) - x[t]) + eps * (lse(x) - mean(x))      lse = logsumexp

torch's `label_smoothing` (fairseq spreads eps over the V - 1 other tokens
instead: a difference of eps / V on the reference). Its gradient with
respect to x is softmax(x) - (1 - eps) * onehot(t) - eps / V.

`projected_loss` never holds the (N, V) logits: it projects a chunk of rows at
a time and, the loss being the end of the graph, computes that chunk's gradient
while its logits are in cache; the backward pass only scales the stored
gradients (why: docs/cpu-speed.md). Shapes (docs/shapes.md): N target tokens,
D, V; n a chunk's rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.model.linear import linear
from pipeline.tokens import PAD

# Rows projected at once: 1024 x 8k float32 logits = 32 MB, about L3 (fastest measured: docs/cpu-speed.md)
CHUNK_ROWS = 1024


def projected_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    smoothing: float,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """F.cross_entropy(F.linear(hidden, weight, bias), target, label_smoothing=smoothing,
    ignore_index=PAD, reduction="sum"), fused.

    hidden (..., D), weight (V, D), bias (V,) or None, target (...) -> scalar
    float32; smoothing 0 is plain cross-entropy. PAD rows are dropped before the projection.
    Under autocast the matmuls run in its dtype, the softmax in float32, as autocast would.
    """
    if torch.compiler.is_compiling():
        # A compiled graph keeps static shapes (no boolean indexing) and lets inductor fuse the rest.
        logits = F.linear(hidden, weight, bias).float()
        return F.cross_entropy(
            logits.flatten(0, -2),
            target.flatten(),
            ignore_index=PAD,
            label_smoothing=smoothing,
            reduction="sum",
        )
    keep = target != PAD
    hidden, target = hidden[keep], target[keep]  # (N, D), (N,)
    if not (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        with torch.no_grad():
            return _ProjectedLoss.chunks(hidden, weight, bias, target, smoothing, chunk_rows, grads=False)[0]
    return _ProjectedLoss.apply(hidden, weight, bias, target, smoothing, chunk_rows)


class _ProjectedLoss(torch.autograd.Function):
    @staticmethod
    def chunks(hidden, weight, bias, target, smoothing, chunk_rows, grads: bool):
        """-> loss, and when `grads` d loss / d (hidden, weight, bias)."""
        N, V = hidden.size(0), weight.size(0)
        kind = hidden.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype
        w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if grads else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if grads and bias is not None else None
        for start in range(0, N, chunk_rows):
            h = hidden[start : start + chunk_rows].to(dtype)  # (n, D)
            t = target[start : start + chunk_rows]  # (n,)
            logits = linear(h, w, b).float()  # (n, V): the matmul in the autocast dtype, the rest float32
            picked = logits.gather(1, t[:, None]).squeeze(1)  # (n,)
            total = logits.sum(-1)  # (n,)
            top = logits.amax(-1, keepdim=True)  # (n, 1)
            e = logits.sub_(top).exp_()  # (n, V), in place: one exp serves loss and gradient
            norm = e.sum(-1, keepdim=True)  # (n, 1)
            lse = (top + norm.log()).squeeze(1)  # (n,)
            loss += (lse - (1 - smoothing) * picked - smoothing / V * total).sum()
            if not grads:
                continue
            assert grad_hidden is not None and grad_weight is not None  # made above when grads
            g = e.div_(norm).sub_(smoothing / V)  # softmax - eps / V
            g[torch.arange(t.size(0), device=t.device), t] -= 1 - smoothing  # (n, V)
            g = g.to(dtype)
            grad_hidden[start : start + chunk_rows] = linear(g, w.t())  # g @ w
            if g.dtype == grad_weight.dtype:
                grad_weight.addmm_(g.t(), h)  # accumulated in place: no (V, D) temporary
            else:
                grad_weight += g.t() @ h  # the autocast dtype's product, accumulated in float32
            if grad_bias is not None:
                grad_bias += g.sum(0, dtype=torch.float32)
        return loss, grad_hidden, grad_weight, grad_bias

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, smoothing, chunk_rows):
        loss, *grads = _ProjectedLoss.chunks(hidden, weight, bias, target, smoothing, chunk_rows, grads=True)
        ctx.save_for_backward(*(g for g in grads if g is not None))
        ctx.has_bias, ctx.weight_dtype = bias is not None, weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, *rest = ctx.saved_tensors
        grad_bias = rest[0] * grad_loss if ctx.has_bias else None
        grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        return grad_hidden * grad_loss, grad_weight, grad_bias, None, None, None
