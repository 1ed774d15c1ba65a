"""bench/profile_update.py: it profiles our update and splits its time by kind of work, on any CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from bench import profile_update
from bench.training import make_setup, ours, synthetic_batch, with_precision
from pipeline import params as P
from pipeline.model import linear

PRODUCTS = {"matrix products", "fused attention"}


def test_the_update_profile_says_where_the_time_goes():
    result = CliRunner().invoke(
        profile_update.main, ["--precision", "fp32", "--no-compile", "--updates", "1", "--top", "0"]
    )
    assert result.exit_code == 0, result.output
    shares = dict(re.findall(r"^  (\w[\w ]*?) +[\d.]+ ms +([\d.]+)%$", result.output, re.M))
    assert shares.keys() <= set(profile_update.KINDS), result.output
    expected = {"matrix products", "elementwise and reductions", "optimizer", "dropout masks"}
    assert expected <= shares.keys(), result.output
    assert abs(sum(map(float, shares.values())) - 100) < 0.5


def test_every_operator_torch_counts_flops_for_is_a_matrix_product():
    """torch's FLOP counter (formulas for products, convolutions, attention) names them, not us."""
    params = P.load(Path(__file__).resolve().parents[2] / "params.yaml")
    setup = make_setup(params, smoke=True, seconds=0.1, repeats=1, real_batches=0)
    batch = synthetic_batch(setup.vocab, setup.batch, setup.length, seed=1)
    step = ours(with_precision(params, setup.model, "fp32", False), setup.vocab, seed=1)
    step(batch)
    with FlopCounterMode(display=False) as flops:
        step(batch)
    counted = {str(op).replace(".", "::", 1) for op in flops.get_flop_counts()["Global"]}
    assert counted, "torch counted no FLOPs in an update"
    assert {name: profile_update.kind_of(name) for name in counted} == dict.fromkeys(
        counted, "matrix products"
    )


@pytest.mark.parametrize("use_onednn", [True, False], ids=["onednn", "mkl"])
def test_a_linear_layer_is_matrix_products_whichever_library_runs_it(use_onednn):
    """Forward and backward of our Linear: the products and the views around them, nothing else."""
    before = linear.use_onednn(use_onednn)
    try:
        layer = linear.Linear(512, 512, bias=False)
        x = torch.randn(64, 512, requires_grad=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            layer(x).sum().backward()
    finally:
        linear.use_onednn(before)
    kinds = {e.name: profile_update.kind_of(e.name) for e in prof.events() if e.name != "aten::sum"}
    assert "matrix products" in kinds.values(), kinds
    assert set(kinds.values()) <= {"matrix products", "memory and views", "framework", "casts"}, kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("aten::mm", "matrix products"),  # MKL on every CPU; cuBLAS on a GPU
        ("aten::addmm", "matrix products"),
        ("aten::addmm_", "matrix products"),
        ("aten::bmm", "matrix products"),
        ("aten::baddbmm", "matrix products"),
        ("aten::matmul", "matrix products"),
        ("aten::linear", "matrix products"),
        ("aten::_addmm_activation", "matrix products"),
        ("mkldnn::_linear_pointwise", "matrix products"),  # oneDNN: Zen 4, AMX Xeons
        ("aten::mkldnn_linear_backward_weights", "matrix products"),
        ("aten::mkldnn_linear_backward_input", "matrix products"),
        ("onednn::qlinear_pointwise", "matrix products"),  # int8
        ("aten::_int_mm", "matrix products"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "fused attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "fused attention"),
        ("aten::_scaled_dot_product_efficient_attention", "fused attention"),  # GPUs
        ("aten::mul", "elementwise and reductions"),
        ("aten::native_layer_norm_backward", "elementwise and reductions"),
        ("aten::_softmax", "elementwise and reductions"),
        ("aten::sum", "elementwise and reductions"),
        ("aten::copy_", "casts"),
        ("aten::view", "memory and views"),
        ("aten::empty_strided", "memory and views"),
        ("aten::bernoulli_", "dropout masks"),
        ("aten::_fused_adamw_", "other"),  # outside an optimizer step it is not recognized
        ("aten::linalg_vector_norm", "optimizer"),  # the gradient clipping
        ("_OneDnnLinearBackward", "framework"),
        ("autograd::engine::evaluate_function: MmBackward0", "framework"),
        ("## Call CompiledFxGraph fabc ##", "compiled kernels"),
    ],
)
def test_operators_of_every_cpu_and_gpu_are_classified_by_what_they_do(name, kind):
    assert profile_update.kind_of(name) == kind


def test_work_inside_a_dropout_mask_or_an_optimizer_step_counts_there():
    assert profile_update.kind_of("aten::ge", ("pipeline::keep_mask_like",)) == "dropout masks"
    assert profile_update.kind_of("aten::_fused_adamw_", ("Optimizer.step#AdamW.step",)) == "optimizer"


def test_an_operator_not_recognized_is_named_in_the_summary():
    by_kind = {"matrix products": 900.0, "other": 100.0}
    lines = profile_update.summary(by_kind, {"myops::frobnicate": 95.0, "myops::tiny": 5.0}, updates=1)
    assert any("myops::frobnicate" in line and "9.5%" in line for line in lines), lines
    assert not any("myops::tiny" in line for line in lines), lines  # under 1%
    assert profile_update.kind_of("myops::frobnicate") == "other"
