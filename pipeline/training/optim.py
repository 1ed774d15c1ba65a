"""Optimization: the optimizer and fairseq's inverse-sqrt LR schedule (the loss: pipeline/model/loss.py)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from pipeline.params import TrainParams


def inverse_sqrt(step: int, warmup_steps: int) -> float:
    """LR multiplier of update `step` (1-based): linear warmup to 1, then sqrt(warmup / step).

    fairseq's inverse_sqrt with warmup_init_lr 0, except that the first update
    already gets 1/warmup of the peak (fairseq spends it at lr 0). Without
    warmup the decay counts from step 1: sqrt(1 / step).
    """
    if step <= warmup_steps:
        return step / warmup_steps
    return math.sqrt(max(warmup_steps, 1) / step)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """A LambdaLR whose k-th scheduler.step() (one per update) sets the LR of update k + 1."""
    # A module-level function would do too; a lambda over a plain int keeps the
    # scheduler's state_dict free of code (LambdaLR stores None for functions).
    return LambdaLR(optimizer, lambda done: inverse_sqrt(done + 1, warmup_steps))


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight matrices decay; biases, LayerNorms and embedding tables do not.

    Decaying an embedding pulls rare tokens' rows to zero, and decaying a
    LayerNorm's gain fights the normalization, so both are left out (as in
    BERT and GPT-2 training). A tied output projection is the embedding, so it
    is left out too; an untied one is a projection matrix and decays.
    """
    exempt: set[int] = set()
    for module in model.modules():
        if isinstance(module, (nn.LayerNorm, nn.Embedding)):
            exempt.update(id(p) for p in module.parameters(recurse=False))
    params = [p for p in model.parameters() if p.requires_grad]  # shared tensors once
    decay = [p for p in params if id(p) not in exempt and p.ndim >= 2]
    rest = [p for p in params if id(p) in exempt or p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, train: TrainParams) -> torch.optim.Optimizer:
    """Adam (L2 weight decay) or AdamW (decoupled), at the peak LR; the scheduler scales it.

    torch's fused implementation (one kernel over all parameters, on CPU and
    CUDA alike) replaces its default multi-tensor one: the same update in a
    fraction of the time.
    """
    kind = torch.optim.AdamW if train.optimizer == "adamw" else torch.optim.Adam
    groups = parameter_groups(model, train.weight_decay)
    b1, b2 = train.betas
    return kind(groups, lr=train.lr, betas=(b1, b2), eps=train.eps, fused=True)
