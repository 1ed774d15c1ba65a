"""LR schedule, optimizer parameter groups, and the label-smoothed loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pipeline.model import build_model
from pipeline.optim import (
    build_optimizer,
    build_scheduler,
    inverse_sqrt,
    label_smoothed_loss,
    parameter_groups,
)
from pipeline.tokens import PAD


def test_warmup_is_linear_up_to_the_peak():
    assert [inverse_sqrt(s, 4) for s in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]


def test_after_warmup_the_lr_decays_as_inverse_sqrt():
    assert inverse_sqrt(16, 4) == pytest.approx(0.5)
    assert inverse_sqrt(400, 4) == pytest.approx(0.1)
    values = [inverse_sqrt(s, 4) for s in range(4, 100)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_without_warmup_the_decay_starts_at_step_one():
    assert inverse_sqrt(1, 0) == 1.0
    assert inverse_sqrt(4, 0) == pytest.approx(0.5)


def test_scheduler_gives_each_update_its_lr_and_round_trips():
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.01)
    sched = build_scheduler(opt, warmup_steps=10)
    used = []
    for _ in range(20):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [0.01 * inverse_sqrt(s, 10) for s in range(1, 21)]
    assert used == pytest.approx(expected)
    assert max(used) == pytest.approx(0.01) and used.index(max(used)) == 9

    # A fresh optimizer and scheduler loaded from the state dicts carry on alike.
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.01)
    sched2 = build_scheduler(opt2, warmup_steps=10)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    opt.step(), sched.step(), opt2.step(), sched2.step()
    expected = pytest.approx(0.01 * inverse_sqrt(22, 10))
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == expected


def test_no_weight_decay_on_biases_norms_and_embeddings(params):
    model = build_model(params.model, 50, 50)
    decay, rest = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    decayed = {id(p) for p in decay["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim == 2 for p in decay["params"])
    assert id(model.tgt_embed.tokens.weight) not in decayed
    assert all(id(p) not in decayed for p in model.decoder_norm.parameters())
    assert any("qkv.weight" in names[id(p)] for p in decay["params"])
    # every trainable tensor exactly once
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))


def test_optimizer_kind_and_settings(params):
    model = build_model(params.model, 50, 50)
    opt = build_optimizer(model, params.train)
    assert type(opt).__name__ == {"adamw": "AdamW", "adam": "Adam"}[params.train.optimizer]
    assert opt.param_groups[0]["betas"] == tuple(params.train.betas)
    assert opt.param_groups[0]["lr"] == params.train.lr


def _logits_and_target(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 11, generator=g)  # (B, T, V)
    target = torch.randint(5, 11, (3, 5), generator=g)
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    return logits, target


def test_loss_ignores_padding_positions():
    logits, target = _logits_and_target()
    changed = logits.clone()
    changed[target == PAD] = torch.randn_like(changed[target == PAD]) * 100
    for eps in (0.0, 0.1):
        expected = float(label_smoothed_loss(changed, target, eps))
        assert label_smoothed_loss(logits, target, eps) == pytest.approx(expected)


def test_no_smoothing_is_plain_cross_entropy_summed_over_tokens():
    logits, target = _logits_and_target(1)
    keep = target != PAD
    expected = F.cross_entropy(logits[keep], target[keep], reduction="sum")
    assert label_smoothed_loss(logits, target, 0.0) == pytest.approx(float(expected))


def test_smoothing_mixes_in_the_uniform_distribution():
    logits, target = _logits_and_target(2)
    keep = target != PAD
    lprobs = logits.log_softmax(-1)[keep]  # (N, V)
    nll = -lprobs.gather(1, target[keep][:, None]).sum()
    uniform = -lprobs.mean(-1).sum()
    eps = 0.2
    expected = (1 - eps) * nll + eps * uniform
    assert label_smoothed_loss(logits, target, eps) == pytest.approx(float(expected), rel=1e-5)


def test_loss_is_float32_under_bf16_logits():
    logits, target = _logits_and_target(3)
    loss = label_smoothed_loss(logits.bfloat16(), target, 0.1)
    assert loss.dtype == torch.float32 and math.isfinite(float(loss))
