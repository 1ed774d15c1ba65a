"""One training update over micro-batches: forward, backward, unscale, clip, optimizer and LR step.

`UpdateStep` is built from (params, model, device, dist) alone, with no files,
so the training benchmark (bench/train_speed.py) times and the tests check the
very update that training runs. The loss is normalized by the update's target
tokens summed over all ranks (pipeline/training/distributed.py); a non-finite
loss is reported to the caller, which decides to skip or to stop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pipeline import params as P
from pipeline.data.batching import Batch
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase
from pipeline.training.distributed import ALONE, Dist
from pipeline.training.ema import WeightAverage
from pipeline.training.optim import build_optimizer, build_scheduler


def native_bf16(device: torch.device) -> bool:
    """Whether the device multiplies bf16 natively: a GPU that supports it, or a CPU with AVX512-BF16
    or AMX. Elsewhere (AVX2-only CPUs such as AMD Zen 3) torch's bf16 matmuls fall back to a reference
    kernel, several times slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and (
        torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    )


def resolve_precision(setting: P.Precision, device: torch.device) -> P.Precision:
    """train.precision as the run uses it: auto -> bf16 where the device does bf16 natively, else fp32;
    an explicit bf16 where it does not gets a warning naming the fix."""
    if setting == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if setting == "bf16" and not native_bf16(device):
        warnings.warn(
            f"train.precision bf16: {device} has no native bf16 (no AVX512-BF16 or AMX on this CPU), so "
            "its bf16 matmuls run on a slow fallback; set train.precision: auto (fp32 here) or fp32",
            stacklevel=2,
        )
    return setting


def cpp_compiler() -> bool:
    """Whether inductor finds the C++ compiler it builds CPU kernels with (g++, clang++)."""
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return False
    return True


def resolve_compile(setting: bool | str, precision: P.Precision, device: torch.device) -> bool:
    """train.compile as the run uses it: auto -> on where it was measured faster, bf16 on a CPU
    (1.2x on real batches on an AMD EPYC Zen 4, bench/train_speed; fp32 0.9-1.0x there) when a C++
    compiler is there to build the kernels; off elsewhere, GPUs included until bench/gpu_check
    measures them."""
    if setting == "auto":
        return device.type == "cpu" and precision == "bf16" and cpp_compiler()
    if setting and device.type == "cpu" and not cpp_compiler():
        raise UserError(
            "train.compile: true needs a C++ compiler (g++ or clang++) to build torch.compile's CPU "
            "kernels, and none was found; install one (apt install g++) or set train.compile: auto"
        )
    return bool(setting)


def resolve_train(params: P.Params, device: torch.device) -> P.Params:
    """params with train.precision and train.compile auto made what `device` uses: resolved once,
    by whoever builds the UpdateStep, so that the state, the logs and data/model record the same."""
    precision = resolve_precision(params.train.precision, device)
    compiled = resolve_compile(params.train.compile, precision, device)
    return dataclasses.replace(
        params, train=dataclasses.replace(params.train, precision=precision, compile=compiled)
    )


def check_precision(precision: str, device: torch.device) -> None:
    if precision == "fp16" and device.type != "cuda":
        raise UserError(
            "train.precision fp16 needs a GPU (its loss scaling is CUDA-only); use bf16 or fp32 on CPU"
        )
    if precision == "auto":
        raise ValueError("train.precision auto must be resolved first (resolve_precision)")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for train.precision bf16 / fp16; nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


class UpdateStep:
    """The model and what updates it: the DDP / compiled net, optimizer, LR schedule and grad scaler."""

    def __init__(self, params: P.Params, model: Seq2SeqBase, device: torch.device, dist: Dist = ALONE):
        t = params.train
        if t.compile == "auto":
            raise ValueError("train.compile auto must be resolved first (resolve_train)")
        self.cfg = t
        check_precision(t.precision, device)
        self.model, self.device, self.dist = model, device, dist
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self.net = self._wrap(model)
        self.optimizer = build_optimizer(model, t)
        self.scheduler = build_scheduler(self.optimizer, t.warmup_steps)
        self.scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16")
        # train.ema_decay: the shadow weights that validation and the checkpoints use (ema.py)
        self.ema = WeightAverage(model, t.ema_decay) if t.ema_decay > 0 else None
        self.last_lr = t.lr  # the LR of the latest update, for the logs

    def _wrap(self, model: Seq2SeqBase) -> Callable[..., torch.Tensor]:
        net: torch.nn.Module = model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer changes in training (positions are filtered to fit), so none is broadcast.
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=ids, broadcast_buffers=False
            )
            net = self.ddp
        return torch.compile(net) if self.cfg.compile else net

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.cfg.precision, self.device)

    def evaluated_weights(self) -> contextlib.AbstractContextManager:
        """The weights validation scores and checkpoints save: the moving average with
        train.ema_decay (the raw weights again after the block), else the model's own."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def update(self, batches: list[Batch]) -> tuple[float, int] | None:
        """One update over micro-batches (update_freq of them); -> (loss sum, target tokens), all ranks.

        None when the loss was not finite: the gradients are dropped and the
        weights, optimizer, scheduler and scaler are left as they were.
        """
        n_tokens = sum(b.n_tgt_tokens for b in batches)
        if self.dist.enabled:
            count = torch.tensor(n_tokens, dtype=torch.float64, device=self.device)
            n_tokens = int(self.dist.all_sum(count).item())
        # DDP averages gradients over ranks; scaling by world_size makes them sum / global tokens.
        total = self.backward(batches, scale=self.dist.world_size / n_tokens)
        if not torch.isfinite(total):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer_step()
        return float(total), n_tokens

    def backward(self, batches: list[Batch], scale: float) -> torch.Tensor:
        """Accumulate the gradients of scale * each micro-batch's loss; -> the loss sum, all ranks."""
        total = torch.zeros((), device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True)
            # DDP syncs gradients on the last micro-batch only.
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if last or self.ddp is None else self.ddp.no_sync()
            with sync:
                with self.autocast():
                    loss = self.net(batch.src, batch.tgt_in, batch.tgt_out, self.cfg.label_smoothing)
                self.scaler.scale(loss * scale).backward()
            total += loss.detach()
        return self.dist.all_sum(total)

    def optimizer_step(self) -> None:
        self.last_lr = self.optimizer.param_groups[0]["lr"]
        self.scaler.unscale_(self.optimizer)
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update()

    def state_dict(self) -> dict[str, Any]:
        """The tensors of the run: weights, optimizer moments, schedule, scaler and weight average."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        } | ({"ema": self.ema.state_dict()} if self.ema is not None else {})

    def load_state_dict(self, saved: dict[str, Any], source: Path) -> None:
        checkpoint.load_weights(self.model, saved["model"], source)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.scaler.load_state_dict(saved["scaler"])
        if self.ema is not None:
            self.ema.load_state_dict(saved["ema"])  # train.ema_decay is in the saved params: it is there
