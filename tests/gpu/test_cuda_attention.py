"""Attention on the GPU: each fused scaled_dot_product_attention kernel (flash, memory-efficient,
math) gives what the explicit path gives, forward and backward, with and without padding masks;
and the weights recorded on request (the explicit path, on any device) still match the CPU's.

Both paths in fp32 / bf16 / fp16 are compared with a float64 reference of the explicit path, within
the dtype's tolerance (TOL: about 8 units of the dtype's last place for values around 1).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pipeline.model.attention import MultiHeadAttention
from pipeline.model.transformer import build_model
from tests.support.repo import BASE

pytestmark = pytest.mark.cuda

D, H = 64, 4
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
    torch.float16: dict(atol=4e-3, rtol=4e-3),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def inputs(
    masking: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """x (3, 7, D), memory (3, 9, D) for cross-attention, and the mask (B, 1, 1, K) or None."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, D, generator=g, dtype=torch.float64)
    memory = torch.randn(3, 9, D, generator=g, dtype=torch.float64) if masking == "cross" else None
    keys = 9 if masking == "cross" else 7
    lengths = torch.tensor([keys, keys - 3, 2])
    mask = (torch.arange(keys)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, K)
    if masking in ("none", "causal"):
        mask = None
    to = lambda t: None if t is None else t.to(device)
    return to(x), to(memory), to(mask)


def run(
    mha: MultiHeadAttention, x, memory, mask, causal: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """Output, and the gradients of (x, the output projection) for a fixed upstream gradient."""
    x = x.detach().to(dtype).clone().requires_grad_()
    memory = None if memory is None else memory.to(dtype)
    mha.zero_grad(set_to_none=True)
    y = mha(x, mask, memory=memory, causal=causal)
    upstream = torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y).to(dtype)
    (y * upstream).sum().backward()
    # Copies: module.to() later converts the parameters' .grad in place.
    return tuple(t.detach().to(torch.float64, copy=True) for t in (y, x.grad, mha.out.weight.grad))


@pytest.mark.parametrize("masking", ["none", "padding", "causal", "cross"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_fused_kernel_equals_the_explicit_path(backend, dtype, masking, cuda, record_property):
    if backend == "flash" and (dtype == "fp32" or masking in ("padding", "cross")):
        pytest.skip("flash attention takes fp16 / bf16 only, and no attention mask")
    dt = DTYPES[dtype]
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0, self_attention=masking != "cross").to(cuda)
    x, memory, mask = inputs(masking, cuda)
    causal = masking == "causal"
    mha.double()
    mha.record = []  # the explicit path, in float64: the reference
    reference = run(mha, x, memory, mask, causal, torch.float64)
    mha.to(dt)
    explicit = run(mha, x, memory, mask, causal, dt)
    mha.record = None
    with sdpa_kernel([BACKENDS[backend]]):
        fused = run(mha, x, memory, mask, causal, dt)
    for name, f, e, r in zip(("output", "grad_x", "grad_out_weight"), fused, explicit, reference):
        record_property(f"{name}_max_abs_diff", float((f - r).abs().max()))
        scale = 1.0 if name == "output" else float(r.abs().max())  # gradients: relative to their size
        tol = dict(atol=TOL[dt]["atol"] * scale, rtol=TOL[dt]["rtol"])
        torch.testing.assert_close(f, r, **tol, msg=lambda m, n=name: f"fused {n}: {m}")
        torch.testing.assert_close(e, r, **tol, msg=lambda m, n=name: f"explicit {n}: {m}")


def small_model(device: torch.device) -> torch.nn.Module:
    cfg = dataclasses.replace(
        BASE.model, d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0, attention_dropout=0.0
    )
    torch.manual_seed(0)
    return build_model(cfg, 50, 50).to(device).eval()


def test_recorded_weights_match_the_cpus_and_recording_changes_no_output(cuda):
    src = torch.randint(5, 50, (3, 8), generator=torch.Generator().manual_seed(2))
    tgt = torch.randint(5, 50, (3, 6), generator=torch.Generator().manual_seed(3))
    src[2, 5:] = 0  # padding: masked keys
    gpu, cpu = small_model(cuda), small_model(torch.device("cpu"))
    with torch.no_grad():
        fused = gpu(src.to(cuda), tgt.to(cuda))  # SDPA everywhere
        with gpu.recording_attention() as on_gpu:
            recorded = gpu(src.to(cuda), tgt.to(cuda))  # the explicit path everywhere
        with cpu.recording_attention() as on_cpu:
            cpu(src, tgt)
    torch.testing.assert_close(recorded, fused, atol=1e-4, rtol=1e-4)
    assert on_gpu.keys() == on_cpu.keys() and len(on_gpu) == 2 * 2 + 2  # encoder self; decoder self, cross
    for name, weights in on_gpu.items():
        for w_gpu, w_cpu in zip(weights, on_cpu[name], strict=True):
            torch.testing.assert_close(w_gpu.cpu(), w_cpu, atol=1e-5, rtol=1e-4)
            assert torch.allclose(w_gpu.sum(-1), torch.ones((), device=cuda), atol=1e-5)
    cross = on_gpu["decoder.0.cross_attn"][0]  # (B, H, T, S)
    assert torch.all(cross[2, :, :, 5:] == 0)  # no weight on the padded source positions
