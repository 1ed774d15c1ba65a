"""Linear layers whose large float32 CPU products run on oneDNN rather than MKL.

oneDNN is the faster at the default model's large products on the CPU this
project is developed on, MKL at small ones (a lower cost per call): `linear`
takes oneDNN from MIN_MACS multiply-adds, MKL below. Same float32 arithmetic,
another summation order. Under inference mode a weight is packed once into
oneDNN's layout and reused, bit for bit the same products.
PIPELINE_CPU_GEMM=mkl (or `use_onednn(False)`) puts everything on MKL.

Why, the measurements and how to redo them: docs/cpu-gemm.md, with what the
choice bought end to end.
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
MIN_MACS = 2**23  # multiply-adds of one product from which oneDNN is the faster (docs/cpu-gemm.md)


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
