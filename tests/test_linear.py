"""pipeline.linear: the oneDNN route equals F.linear, forward and backward, and is taken only where meant."""

import pytest
import torch
import torch.nn.functional as F

from pipeline import linear as L

needs_onednn = pytest.mark.skipif(not L._ONEDNN, reason="this torch build has no oneDNN (mkldnn) linear")


def operands(seed: int, bias: bool = True, rows: int = 256):
    """x (2, rows / 2, 256), weight (512, 256): a product of 2**25 multiply-adds at 256 rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, rows // 2, 256, generator=g)
    w = torch.randn(512, 256, generator=g) / 16
    b = torch.randn(512, generator=g) if bias else None
    return x, w, b


@needs_onednn
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_forward_and_gradients_equal_f_linear(relu, bias):
    x, w, b = operands(0, bias)
    leaves = [t.clone().requires_grad_() for t in (x, w) + ((b,) if bias else ())]
    refs = [t.detach().clone().requires_grad_() for t in leaves]
    up = torch.randn(2, 128, 512, generator=torch.Generator().manual_seed(1))

    assert L.takes_onednn(x, w)
    y = L.linear(*leaves[:2], leaves[2] if bias else None, relu=relu)
    r = F.linear(*refs[:2], refs[2] if bias else None)
    r = F.relu(r) if relu else r
    assert relu is False or bool((y == 0).any())  # the ReLU really clipped something
    torch.testing.assert_close(y, r)
    (y * up).sum().backward()
    (r * up).sum().backward()
    for a, e in zip(leaves, refs):
        torch.testing.assert_close(a.grad, e.grad)


@needs_onednn
def test_takes_onednn_only_for_large_float32_cpu_products_outside_autocast():
    x, w, _ = operands(0)
    assert L.takes_onednn(x, w)
    small, _, _ = operands(0, rows=32)  # 2**22 multiply-adds: below MIN_MACS, MKL is the faster
    assert not L.takes_onednn(small, w)
    assert not L.takes_onednn(x.double(), w.double())
    assert not L.takes_onednn(x.bfloat16(), w.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not L.takes_onednn(x, w)


@needs_onednn
def test_the_route_is_really_onednn(monkeypatch):
    """Not F.linear under another name: with the oneDNN op removed, the call fails."""
    x, w, b = operands(0)

    def gone(*args):
        raise RuntimeError("oneDNN op called")

    monkeypatch.setattr(L, "_onednn", gone)
    with pytest.raises(RuntimeError, match="oneDNN op called"):
        L.linear(x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert L.linear(x, w, b).dtype == torch.bfloat16  # autocast keeps torch's own (bf16 oneDNN) path


def test_switched_off_the_route_is_f_linear(monkeypatch):
    """_ONEDNN False (PIPELINE_CPU_GEMM=mkl, bench.gemm_choice's MKL side): the oneDNN op is never called."""
    x, w, b = operands(0)

    def gone(*args):
        raise RuntimeError("oneDNN op called")

    monkeypatch.setattr(L, "_onednn", gone)
    monkeypatch.setattr(L, "_ONEDNN", False)
    assert not L.takes_onednn(x, w)
    torch.testing.assert_close(L.linear(x, w, b, relu=True), F.relu(F.linear(x, w, b)), rtol=0, atol=0)


def test_linear_module_is_a_drop_in_nn_linear():
    torch.manual_seed(0)
    ours = L.Linear(256, 512)
    ref = torch.nn.Linear(256, 512)
    ref.load_state_dict(ours.state_dict())
    x, _, _ = operands(2)
    torch.testing.assert_close(ours(x), ref(x))
    with torch.inference_mode():
        torch.testing.assert_close(ours(x), ref(x))
