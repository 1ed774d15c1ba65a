"""tests/gpu/step.py: the GPU tests' Update is the train stage's UpdateStep, with its forward wrapped
by a compile backend of the tests' or a DDP over a process group of one (tests/gpu/ddp_probe.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from pipeline.model.transformer import build_model
from pipeline.training.step import UpdateStep, resolve_train
from tests.gpu.step import Update
from tests.support.models import VOCAB, tiny_params
from tests.support.steps import make_batch, random_rows, weights

CPU = torch.device("cpu")


def pair(wrapper=None) -> tuple[Update, UpdateStep]:
    """An Update with `wrapper` and a bare UpdateStep, of the same weights."""
    params = resolve_train(tiny_params(dict(dropout=0.0), precision="fp32"), CPU)
    made = []
    for _ in range(2):
        torch.manual_seed(0)
        made.append(build_model(params.model, VOCAB, VOCAB))
    return Update.build(made[0], params, "fp32", wrapper=wrapper), UpdateStep(params, made[1], CPU)


def test_a_wrapped_forward_is_the_one_an_update_runs():
    calls = []

    def wrapper(model):
        def forward(*args):
            calls.append(len(args))
            return model(*args)

        return forward

    step, bare = pair(wrapper)
    rows = random_rows(8, seed=2)
    batches = [make_batch(rows[:3]), make_batch(rows[3:])]
    assert step.update(batches) == bare.update(batches)
    assert calls == [4, 4]  # each micro-batch: src, tgt_in, tgt_out, smoothing
    for name, tensor in weights(step).items():
        assert torch.equal(tensor, weights(bare)[name]), name  # the wrapped model is the one trained


def test_a_ddp_wrapped_step_accumulates_as_the_bare_one(tmp_path):
    """A DDP over a gloo group of one (ddp_probe.py's): no_sync on all but the last micro-batch."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        step, bare = pair(torch.nn.parallel.DistributedDataParallel)
        assert step.ddp is step.net
        rows = random_rows(8, seed=3)
        batches = [make_batch(rows[:3]), make_batch(rows[3:])]
        loss, tokens = step.update(batches)
        bare_loss, bare_tokens = bare.update(batches)
    finally:
        dist.destroy_process_group()
    assert tokens == bare_tokens and abs(loss - bare_loss) <= 1e-6 * abs(bare_loss)
    for name, tensor in weights(step).items():
        assert torch.allclose(tensor, weights(bare)[name], atol=1e-6), name


def test_a_compile_backend_other_than_inductor_wraps_the_forward_and_keeps_train_compile_off():
    params = resolve_train(tiny_params(dict(dropout=0.0), precision="fp32"), CPU)
    step = Update.build(build_model(params.model, VOCAB, VOCAB), params, "fp32", compile_backend="eager")
    assert step.net is not step.model and step.cfg.compile is False and step.ddp is None
    with pytest.raises(ValueError, match="a compile backend or a wrapper, not both"):
        Update.build(build_model(params.model, VOCAB, VOCAB), params, "fp32", "inductor", wrapper=lambda m: m)
