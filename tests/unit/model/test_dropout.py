"""pipeline/model/dropout.py: torch's dropout semantics from a cheaper mask."""

import pytest
import torch

from pipeline.model.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_rate_is_one_minus_p(p):
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([1_000_000]), p, torch.device("cpu"))
    n = keep.numel()
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(float(keep.float().mean()) - (1 - p)) < 5 * sd + 2**-16


def test_mask_has_no_pattern_across_the_four_lanes_of_a_word():
    """Each 64-bit word feeds four elements: every lane must keep at the same rate, independently."""
    torch.manual_seed(1)
    keep = keep_mask(torch.Size([400_000]), 0.5, torch.device("cpu")).view(-1, 4).float()  # (words, lanes)
    assert torch.allclose(keep.mean(0), torch.full((4,), 0.5), atol=0.01)
    corr = torch.corrcoef(keep.t())
    assert (corr - torch.eye(4)).abs().max() < 0.02


def test_kept_values_are_scaled_exactly_and_dropped_ones_are_zero():
    torch.manual_seed(2)
    x = torch.randn(64, 33)
    y = dropout(x, 0.25, training=True)
    kept = y != 0
    assert 0 < kept.sum() < x.numel()
    torch.testing.assert_close(y[kept], x[kept] / 0.75, rtol=0, atol=1e-6)


def test_gradient_flows_through_kept_elements_only():
    torch.manual_seed(3)
    x = torch.randn(50, 20, requires_grad=True)
    y = dropout(x, 0.4, training=True)
    y.sum().backward()
    kept = y.detach() != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.6)


def test_bf16_input_keeps_dtype_and_scale():
    torch.manual_seed(4)
    x = torch.randn(100, 10).bfloat16()
    y = dropout(x, 0.1, training=True)
    assert y.dtype == torch.bfloat16
    kept = y != 0
    torch.testing.assert_close(y[kept], (x[kept].float() / 0.9).bfloat16())


def test_eval_and_p_zero_are_the_identity_and_p_one_drops_all():
    x = torch.randn(4, 5)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    assert (dropout(x, 1.0, training=True) == 0).all()
    module = Dropout(0.3).eval()
    assert module(x) is x and "p=0.3" in repr(module)


def test_the_seed_reproduces_the_mask_and_the_rng_state_resumes_it():
    torch.manual_seed(5)
    x = torch.ones(1000)
    a = dropout(x, 0.5, training=True)
    state = torch.get_rng_state()
    b = dropout(x, 0.5, training=True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.5, training=True), a)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.5, training=True), b)
    assert not torch.equal(a, b)


def test_float32_and_bf16_paths_draw_the_same_mask_and_scale_alike():
    """The float32 multiplier path keeps exactly the elements the bf16 path keeps, with x * scale."""
    x = torch.randn(37, 29)
    torch.manual_seed(5)
    y32 = dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    y16 = dropout(x.bfloat16(), 0.3, training=True)
    assert torch.equal(y32 != 0, y16 != 0)
    kept = y32 != 0
    assert torch.equal(y32[kept], x[kept] * (1.0 / 0.7))
