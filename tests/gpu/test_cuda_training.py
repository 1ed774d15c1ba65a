"""Training updates on the GPU: bf16 and fp16 (with the grad scaler) stay finite and close to fp32,
and torch.compile of the model gives the eager losses.

The update is the train stage's own (pipeline.training.step.UpdateStep: label-smoothed loss over the
target tokens, clip 1.0, AdamW, a 4-update warmup), on the same initial weights and batches, dropout
off so that the runs differ in arithmetic alone. fp32 here is true fp32: torch leaves TF32 matmuls
off by default.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from pipeline.model.transformer import build_model
from tests.gpu.corpus import synthetic_batch
from tests.gpu.step import Update
from tests.support.repo import BASE

pytestmark = pytest.mark.cuda

VOCAB = 1000
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
# Relative difference to fp32 allowed in the first loss (same weights, one forward) and in any later
# one (after the updates' rounding differences have compounded).
FIRST_TOL = {"bf16": 1e-2, "fp16": 2e-3}
LATER_TOL = {"bf16": 5e-2, "fp16": 2e-2}


def losses(
    cfg, precision: str, steps: int, device: torch.device, compile_backend: str | None = None
) -> tuple[list[float], Update]:
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, VOCAB).to(device)
    params = dataclasses.replace(BASE, train=dataclasses.replace(BASE.train, lr=1e-3, warmup_steps=4))
    update = Update.build(model, params, precision, compile_backend)
    batches = [synthetic_batch(VOCAB, rows=32, length=20, seed=i) for i in range(4)]
    return [update(batches[i % len(batches)]) for i in range(steps)], update


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_updates_are_finite_and_close_to_fp32(precision, cuda, record_property):
    cfg = dataclasses.replace(BASE.model, **NO_DROPOUT)  # params.yaml's model
    reference, _ = losses(cfg, "fp32", 20, cuda)
    got, update = losses(cfg, precision, 20, cuda)
    relative = [abs(a - b) / b for a, b in zip(got, reference)]
    record_property("max_relative_loss_diff", max(relative))
    assert all(math.isfinite(x) for x in got), got
    assert relative[0] < FIRST_TOL[precision], (got[0], reference[0])
    assert max(relative) < LATER_TOL[precision], list(zip(got, reference))
    assert got[-1] < got[0] - 0.5 and reference[-1] < reference[0] - 0.5  # both learn the 4 batches
    if precision == "fp16":
        # A skipped update (inf gradients) halves the scale from 2**16; the grad scaler must not
        # have skipped more than the first few while it found its level.
        record_property("final_loss_scale", update.scaler.get_scale())
        assert update.scaler.get_scale() >= 2.0**13


@pytest.mark.parametrize(("precision", "rtol"), [("fp32", 1e-3), ("bf16", 2e-2)])
def test_compiled_model_gives_the_eager_losses(precision, rtol, cuda, record_property):
    # One small model, since inductor compiles for a while. fp32 to a tight tolerance over six
    # updates; bf16 (what train.compile compiles by default) on the first loss, before bf16's
    # rounding differences compound through the updates.
    cfg = dataclasses.replace(BASE.model, d_model=128, n_heads=4, d_ff=256, n_layers=1, **NO_DROPOUT)
    eager, _ = losses(cfg, precision, 6, cuda)
    torch._dynamo.reset()
    compiled, _ = losses(cfg, precision, 6, cuda, compile_backend="inductor")
    relative = [abs(a - b) / b for a, b in zip(compiled, eager)]
    record_property("max_relative_loss_diff", max(relative))
    assert max(relative if precision == "fp32" else relative[:1]) < rtol, list(zip(compiled, eager))
