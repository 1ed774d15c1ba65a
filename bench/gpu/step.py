"""One training update as the train stage takes it, written against the model and torch.optim alone.

The label-smoothed loss summed over the target tokens (the model's forward computes it) is divided
by their number, back-propagated (fp16: through a GradScaler, as the Trainer does), the gradient
norm clipped, and AdamW steps. Nothing here reads the Trainer's internals: bench/gpu_check.py times
this update, and tests/gpu compares its losses across precisions and against torch.compile.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from pipeline import params as P
from pipeline.data.batching import Batch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Update:
    """A model, its optimizer and loss scaler; calling it on a batch takes one update."""

    model: nn.Module  # as built: the optimizer's parameters
    net: nn.Module  # what runs the forward: the model, or torch.compile of it
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    precision: str
    smoothing: float
    clip_norm: float

    @classmethod
    def build(
        cls, model: nn.Module, train: P.TrainParams, precision: str, compile_backend: str | None = None
    ) -> Update:
        """model already on its device; compile_backend: None (eager), "inductor" (the GPU's) or
        "eager" / "aot_eager" (dynamo's capture without code generation, for a CPU rehearsal)."""
        device = next(model.parameters()).device
        if precision == "fp16" and device.type != "cuda":
            raise ValueError("fp16 needs CUDA (its GradScaler is CUDA-only), as train.precision says")
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=train.lr,
            betas=tuple(train.betas),
            eps=train.eps,
            weight_decay=train.weight_decay,
        )
        net = model if compile_backend is None else torch.compile(model, backend=compile_backend)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        return cls(model.train(), net, optimizer, scaler, precision, train.label_smoothing, train.clip_norm)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.precision])

    def __call__(self, batch: Batch) -> float:
        """One update on `batch` (on any device: it is copied over); -> its loss per target token."""
        batch = batch.to(self.device, non_blocking=True)
        with self.autocast():
            loss = self.net(batch.src, batch.tgt_in, batch.tgt_out, self.smoothing)
        self.scaler.scale(loss / batch.n_tgt_tokens).backward()
        self.scaler.unscale_(self.optimizer)
        if self.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()) / batch.n_tgt_tokens  # a sync, as the Trainer's float(total) is
