"""pipeline.model.linear: the oneDNN route equals F.linear, forward and backward, and is taken where meant."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from pipeline.model import linear as L

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
    """_ONEDNN False (PIPELINE_CPU_GEMM=mkl, the MKL route): the oneDNN op is never called."""
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


@needs_onednn
def test_inference_packs_a_parameter_once_per_version_and_matches_the_unpacked_product(monkeypatch):
    x, w, b = operands(3)
    weight, bias = torch.nn.Parameter(w.clone()), torch.nn.Parameter(b.clone())
    packs = []
    reorder = torch.ops.mkldnn._reorder_linear_weight
    monkeypatch.setattr(L, "_PACKED", type(L._PACKED)())
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda *a: packs.append(1) or reorder(*a))
    with torch.inference_mode():
        first, again = L.linear(x, weight, bias), L.linear(x, weight, bias)
        other_rows = [L.linear(x.reshape(-1, 256)[:n], weight, bias) for n in (64, 100)]
    assert len(packs) == 1
    with torch.no_grad():
        plain = L.linear(x, weight, bias)  # not inference mode: the weight as it is
        for n, got in zip((64, 100), other_rows):
            assert torch.equal(got, L.linear(x.reshape(-1, 256)[:n], weight, bias))
    assert torch.equal(first, plain) and torch.equal(again, plain)  # packing changes no bit
    torch.testing.assert_close(first, F.linear(x, w, b))
    with torch.no_grad():
        weight.mul_(-1)  # an optimizer step or load_state_dict: a new version of the values
    with torch.inference_mode():
        flipped = L.linear(x, weight, bias)
    assert len(packs) == 2
    torch.testing.assert_close(flipped, F.linear(x, -w, b))


@pytest.mark.parametrize(
    "value, onednn, warns", [("mkl", False, False), ("oneDNN", True, False), ("mk1", True, True)]
)
def test_the_environment_switch_warns_about_a_value_it_does_not_know(monkeypatch, value, onednn, warns):
    monkeypatch.setenv("PIPELINE_CPU_GEMM", value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert L._chosen_in_environment() is onednn
    assert [str(w.message) for w in caught] == (
        [
            "PIPELINE_CPU_GEMM='mk1' is neither of onednn, mkl; using onednn "
            "(set PIPELINE_CPU_GEMM=mkl for torch's default)"
        ]
        if warns
        else []
    )


def test_use_onednn_switches_the_route_and_returns_the_setting_before():
    x, w, _b = operands(0)
    before = L.use_onednn(False)
    try:
        assert not L.takes_onednn(x, w)
        assert L.use_onednn(True) is False
        assert L.takes_onednn(x, w) is L.AVAILABLE
    finally:
        L.use_onednn(before)


@needs_onednn
def test_parameters_made_under_inference_mode_are_used_as_they_are():
    """They have no version counter to pack by."""
    x, w, b = operands(4)
    with torch.inference_mode():
        weight = torch.nn.Parameter(w.clone())
        torch.testing.assert_close(L.linear(x, weight, b), F.linear(x, w, b))
