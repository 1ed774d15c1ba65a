"""Linear layers whose float32 CPU matmuls run on oneDNN rather than MKL.

torch computes a float32 `F.linear` on CPU with MKL's sgemm. On the AMD EPYC
(Zen 4, AVX-512) this project is developed on, oneDNN's sgemm, which ships in
the same torch build, is 10-30% faster at the model's shapes (measured:
x (64 | 320 | 2048, 256) times weights (768 | 1024 | 8000, 256) and (256,
1024); MKL 2024.2, oneDNN 3.12, 2 threads), with the same IEEE float32
arithmetic: no TF32 or bf16 inside, results equal to MKL's within float32
rounding of a different summation order. CTranslate2 makes the same choice
(MKL on Intel CPUs only).

`linear` takes that route for float32 CPU tensors outside autocast and
outside torch.compile (bf16 autocast already runs on oneDNN; compiled graphs
choose their own kernels), and `F.linear` everywhere else. With gradients, the
input's gradient (g @ W) runs on oneDNN too; the weight's (g^T @ x) stays on
MKL, which is the faster of the two for that transposed product.
`relu=True` applies the ReLU inside the matmul's epilogue (one pass over the
output less).

PIPELINE_CPU_GEMM=mkl in the environment turns the route off (torch's default,
MKL, everywhere): for a CPU where MKL is the faster, and to measure the
difference (bench/README.md).
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

_ONEDNN = (
    os.environ.get("PIPELINE_CPU_GEMM", "onednn").lower() != "mkl"
    and torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], relu: bool) -> torch.Tensor:
    """x (N, D_in) 2-D, weight (D_out, D_in) -> (N, D_out), not a view."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "relu" if relu else "none", [], "")


def takes_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` runs these operands on oneDNN (float32 CPU, no autocast, not compiling)."""
    return (
        _ONEDNN
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, relu: bool = False
) -> torch.Tensor:
    """F.linear(x, weight, bias) (then ReLU if `relu`): x (..., D_in) -> (..., D_out)."""
    if not takes_onednn(x, weight):
        y = F.linear(x, weight, bias)
        return F.relu(y, inplace=True) if relu else y
    rows = x.reshape(-1, x.size(-1))
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (
            bias is not None and bias.requires_grad)):
        y = _OneDnnLinear.apply(rows, weight, bias, relu)
    else:
        y = _onednn(rows, weight, bias, relu)
    return y.view(*x.shape[:-1], weight.size(0))


class _OneDnnLinear(torch.autograd.Function):
    """2-D x: forward and the input's gradient on oneDNN, the weight's on MKL."""

    @staticmethod
    def forward(ctx, x, weight, bias, relu):
        y = _onednn(x, weight, bias, relu)
        ctx.save_for_backward(x, weight, y if relu else None)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, y = ctx.saved_tensors
        if y is not None:  # ReLU: no gradient where the output was clipped to 0 (relu's own backward)
            grad = torch.ops.aten.threshold_backward(grad, y, 0.0)
        grad_x = _onednn(grad, weight.t(), None, False) if ctx.needs_input_grad[0] else None
        grad_weight = grad.t().mm(x) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias, None


class Linear(nn.Linear):
    """nn.Linear computed by `linear` (same parameters, state_dict and init)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
