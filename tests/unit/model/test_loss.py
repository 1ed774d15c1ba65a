"""The label-smoothed loss, fused with the output projection (pipeline/model/loss.py).

Its reference is torch's own: F.cross_entropy on explicit logits, with
label_smoothing, ignoring PAD, summed. Values and gradients must agree, in
float32 and under bf16 autocast, with and without a bias, whether the rows
fit in one chunk or span several.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipeline.model.loss import projected_loss
from pipeline.model.transformer import build_model
from pipeline.tokens import PAD

D, V = 16, 37


def _case(seed: int, bias: bool = False):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(4, 7, D, generator=g, requires_grad=True)  # (B, T, D)
    weight = (torch.randn(V, D, generator=g) * 0.5).requires_grad_()
    b = (torch.randn(V, generator=g) * 0.1).requires_grad_() if bias else None
    target = torch.randint(5, V, (4, 7), generator=g)
    target[0, 4:] = PAD
    target[3, 1:] = PAD
    return hidden, weight, b, target


def _reference(hidden, weight, bias, target, smoothing):
    logits = F.linear(hidden, weight, bias)  # (B, T, V)
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ignore_index=PAD,
        reduction="sum",
        label_smoothing=smoothing,
    )


def _value_and_grads(fn, hidden, weight, bias, target, smoothing):
    leaves = [t for t in (hidden, weight, bias) if t is not None]
    loss = fn(hidden, weight, bias, target, smoothing)
    return loss.detach(), torch.autograd.grad(loss * 3.0, leaves)  # a non-unit upstream gradient


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk_rows", [1, 5, 1024])
def test_fused_loss_and_gradients_equal_cross_entropy_on_logits(smoothing, bias, chunk_rows):
    case = _case(0, bias)
    fused = lambda *a: projected_loss(*a, chunk_rows=chunk_rows)
    value, grads = _value_and_grads(fused, *case, smoothing)
    ref_value, ref_grads = _value_and_grads(_reference, *case, smoothing)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, ref_value, rtol=1e-5, atol=1e-4)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_under_bf16_autocast_it_is_as_accurate_as_autocast_cross_entropy():
    """Both round to bf16 in different places; neither may be further from the float32 truth."""
    case = _case(1)
    exact_value, exact_grads = _value_and_grads(_reference, *case, 0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value, grads = _value_and_grads(projected_loss, *case, 0.1)
        ref_value, ref_grads = _value_and_grads(_reference, *case, 0.1)
    hidden, weight = case[:2]
    assert value.dtype == torch.float32
    assert grads[0].dtype == hidden.dtype and grads[1].dtype == weight.dtype
    assert abs(value - exact_value) <= 2 * abs(ref_value - exact_value) + 1e-3 * abs(exact_value)
    for got, ref, exact in zip(grads, ref_grads, exact_grads):
        assert (got - exact).abs().max() <= 1.5 * (ref - exact).abs().max()


def test_padding_rows_contribute_nothing():
    hidden, weight, _, target = _case(2)
    changed = hidden.detach().clone()
    changed[target == PAD] = torch.randn_like(changed[target == PAD]) * 100
    changed.requires_grad_()
    loss = projected_loss(changed, weight, None, target, 0.1)
    torch.testing.assert_close(loss, projected_loss(hidden, weight, None, target, 0.1))
    (grad,) = torch.autograd.grad(loss, [changed])
    assert (grad[target == PAD] == 0).all() and (grad[target != PAD] != 0).any()


def test_without_gradients_it_returns_the_same_value():
    hidden, weight, _, target = _case(3)
    with_grad = projected_loss(hidden, weight, None, target, 0.1)
    with torch.no_grad():
        without = projected_loss(hidden, weight, None, target, 0.1)
    assert not without.requires_grad
    torch.testing.assert_close(without, with_grad.detach())


def test_smoothing_mixes_in_the_uniform_distribution():
    """The formula itself, not only agreement with torch: (1 - eps) * nll + eps * mean over V of -log p."""
    hidden, weight, _, target = _case(4)
    keep = target != PAD
    lprobs = F.linear(hidden, weight).log_softmax(-1)[keep]  # (N, V)
    nll = -lprobs.gather(1, target[keep][:, None]).sum()
    uniform = -lprobs.mean(-1).sum()
    eps = 0.2
    torch.testing.assert_close(
        projected_loss(hidden, weight, None, target, eps), (1 - eps) * nll + eps * uniform
    )


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_model_forward_with_target_is_the_loss_of_its_logits(params, arch):
    import dataclasses

    cfg = dataclasses.replace(
        params.model,
        arch=arch,
        d_model=32,
        n_heads=2,
        d_ff=64,
        n_layers=2,
        encoder_layers=None,
        decoder_layers=None,
        dropout=0.0,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    model = build_model(cfg, 40, 40).eval()
    src = torch.randint(5, 40, (3, 6))
    tgt = torch.randint(5, 40, (3, 5))
    tgt[1, 3:] = PAD
    src[2, 4:] = PAD
    ref = F.cross_entropy(
        model(src, tgt).flatten(0, 1), tgt.flatten(), ignore_index=PAD, reduction="sum", label_smoothing=0.1
    )
    torch.testing.assert_close(model(src, tgt, tgt, 0.1), ref, rtol=1e-5, atol=1e-4)


def test_the_compiled_branch_is_the_same_loss_as_the_fused_one(monkeypatch):
    """Under torch.compile the loss is the plain composition (static shapes for inductor)."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 16, requires_grad=True)
    weight, bias = torch.randn(40, 16, requires_grad=True), torch.randn(40)
    target = torch.randint(1, 40, (3, 5))
    target[0, 3:] = PAD
    fused = projected_loss(hidden, weight, bias, target, 0.1)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    plain = projected_loss(hidden, weight, bias, target, 0.1)
    torch.testing.assert_close(plain, fused, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(plain, (hidden, weight))
    monkeypatch.undo()
    expected = torch.autograd.grad(projected_loss(hidden, weight, bias, target, 0.1), (hidden, weight))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
