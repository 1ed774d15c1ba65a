"""LR schedule and optimizer parameter groups."""

from __future__ import annotations

import itertools

import pytest
import torch

from pipeline.model.transformer import build_model
from pipeline.training.optim import (
    build_optimizer,
    build_scheduler,
    inverse_sqrt,
    parameter_groups,
)


def test_warmup_is_linear_up_to_the_peak():
    assert [inverse_sqrt(s, 4) for s in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]


def test_after_warmup_the_lr_decays_as_inverse_sqrt():
    assert inverse_sqrt(16, 4) == pytest.approx(0.5)
    assert inverse_sqrt(400, 4) == pytest.approx(0.1)
    values = [inverse_sqrt(s, 4) for s in range(4, 100)]
    assert all(a > b for a, b in itertools.pairwise(values))


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
