"""Linear layers whose float32 CPU matmuls run on oneDNN rather than MKL, where that is faster.

torch computes a float32 `F.linear` on CPU with MKL's sgemm. On the AMD EPYC
(Zen 4, AVX-512) this project is developed on, oneDNN's sgemm, which ships in
the same torch build, is faster at the default model's large products and
slower at small ones, because of its higher cost per call. MKL time / oneDNN
time, x (M, K) times weight (N, K), 2 threads, MKL 2024.2, oneDNN 3.12:

    N x K        M=8    M=64   M=320  M=2048
    256 x 256    0.56   0.86   1.02   1.08
    768 x 256    1.00   1.05   1.05   1.00
    1024 x 256   0.99   1.14   1.06   1.02
    256 x 1024   1.50   1.18   1.10   1.12
    8000 x 256   1.62   1.31   1.13   1.11
    128 x 128    0.34   0.60   0.91   1.14
    64 x 32      0.26   0.36   0.54   0.90

So `linear` takes oneDNN for products of at least MIN_MACS = 2**23
multiply-adds (M x N x K), and MKL below. The arithmetic is the same IEEE
float32 (no TF32 or bf16 inside): results equal MKL's within float32 rounding
of a different summation order. CTranslate2 makes a similar choice (MKL on
Intel CPUs only).

The route applies to float32 CPU tensors outside autocast and outside
torch.compile (bf16 autocast already runs on oneDNN; compiled graphs choose
their own kernels); `F.linear` everywhere else. With gradients, the input's
gradient (g @ W, the same size of product) runs on oneDNN too; the weight's
(g^T @ x) stays on MKL, the faster of the two for that transposed product.
`relu=True` applies the ReLU inside the matmul's epilogue (one pass over the
output less).

Inference (decoding under torch.inference_mode) multiplies by the same
weights at every step, so a Parameter's weight is reordered into oneDNN's
blocked layout once per version of its values and reused: oneDNN otherwise
reorders it inside every call. At 64 rows, 2 threads, that takes the
8000 x 256 output projection from 1.7 to 1.3 ms, and the 1024 x 256 and
768 x 256 products 10-25% lower. The packed products equal the unpacked ones
bit for bit; the packed copies (one model's worth of weights) live as long as
their weights.

PIPELINE_CPU_GEMM=mkl in the environment turns the route off (torch's default,
MKL, everywhere): for a CPU where MKL is the faster. `use_onednn(False)` does
the same from code (bench/gemm_choice.py measures the difference).
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

GEMM_LIBRARIES = ("onednn", "mkl")
AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
MIN_MACS = 2**23  # multiply-adds of one product from which oneDNN is the faster (table above)


def _chosen_in_environment() -> bool:
    """PIPELINE_CPU_GEMM: onednn (the default) or mkl; anything else warns and keeps the default."""
    choice = os.environ.get("PIPELINE_CPU_GEMM", "onednn").strip().lower()
    if choice not in GEMM_LIBRARIES:
        warnings.warn(
            f"PIPELINE_CPU_GEMM={choice!r} is neither of {', '.join(GEMM_LIBRARIES)}; "
            "using onednn (set PIPELINE_CPU_GEMM=mkl for torch's default)",
            stacklevel=2,
        )
    return choice != "mkl"


_ONEDNN = AVAILABLE and _chosen_in_environment()
_PACKED = WeakIdKeyDictionary()  # Parameter -> (its values then, their version, the packed copy)


def onednn_enabled() -> bool:
    """Whether large float32 CPU products go to oneDNN now."""
    return _ONEDNN


def use_onednn(enabled: bool) -> bool:
    """Route large float32 CPU products to oneDNN (True, where available) or leave all to MKL;
    -> the setting before, to restore."""
    global _ONEDNN
    before, _ONEDNN = _ONEDNN, AVAILABLE and enabled
    return before


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
    """x (N, D_in) 2-D, weight (D_out, D_in) -> (N, D_out), not a view."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "relu" if relu else "none", [], "")


def _reused(weight: torch.Tensor) -> torch.Tensor:
    """Under inference mode, a Parameter's weight in oneDNN's blocked layout, packed once per
    version of its values; else `weight` itself.

    In-place changes (an optimizer step, load_state_dict) bump the version, and a
    new tensor behind `.data =` has another address (the entry keeps the old one
    alive, so it cannot be reused). Writes through `.data` itself bypass the
    version counter: repack by assigning, or outside inference mode. Parameters
    made under inference mode have no version counter and are not packed.
    """
    if not (torch.is_inference_mode_enabled() and isinstance(weight, nn.Parameter)) or weight.is_inference():
        return weight
    entry = _PACKED.get(weight)
    if entry is None or entry[0].data_ptr() != weight.data_ptr() or entry[1] != weight._version:
        entry = _PACKED[weight] = (
            weight.detach(),
            weight._version,
            torch.ops.mkldnn._reorder_linear_weight(weight, None),
        )
    return entry[2]


def takes_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` runs these operands on oneDNN: float32 CPU, no autocast, not compiling,
    a product of at least MIN_MACS multiply-adds."""
    return (
        _ONEDNN
        and not torch.compiler.is_compiling()
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and x.numel() // max(x.size(-1), 1) * weight.numel() >= MIN_MACS
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, relu: bool = False
) -> torch.Tensor:
    """F.linear(x, weight, bias) (then ReLU if `relu`): x (..., D_in) -> (..., D_out)."""
    if not takes_onednn(x, weight):
        y = F.linear(x, weight, bias)
        return F.relu(y, inplace=True) if relu else y
    rows = x.reshape(-1, x.size(-1))
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        y = _OneDnnLinear.apply(rows, weight, bias, relu)
    else:
        y = _onednn(rows, _reused(weight), bias, relu)
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
