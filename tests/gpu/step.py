"""The train stage's own update (pipeline.training.step.UpdateStep), as the CUDA tests and the DDP
probe run it.

`Update.build` makes the UpdateStep training runs, for a given precision; a
compile backend other than the default (dynamo's "eager" capture, on a CPU)
or a DDP over a process group of one (ddp_probe.py) wraps its forward
instead of train.compile's. Calling it takes one update and returns the loss per
target token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from pipeline import params as P
from pipeline.data.batching import Batch
from pipeline.model.transformer import Seq2SeqBase
from pipeline.training.step import UpdateStep

Wrapper = Callable[[Seq2SeqBase], Callable[..., torch.Tensor]]  # the bare model -> the forward updates run


class Update(UpdateStep):
    """An UpdateStep called on one batch at a time: -> its loss per target token (nan if skipped)."""

    def __init__(self, params: P.Params, model: Seq2SeqBase, device: torch.device, wrapper: Wrapper | None):
        self.wrapper = wrapper  # before UpdateStep's __init__, which wraps the model
        super().__init__(params, model, device)

    def _wrap(self, model: Seq2SeqBase) -> Callable[..., torch.Tensor]:
        if self.wrapper is None:
            return super()._wrap(model)
        net = self.wrapper(model)  # a DDP is the one whose no_sync the micro-batches use
        self.ddp = net if isinstance(net, torch.nn.parallel.DistributedDataParallel) else None
        return net

    @classmethod
    def build(
        cls,
        model: Seq2SeqBase,
        params: P.Params,
        precision: P.Precision,
        compile_backend: str | None = None,
        wrapper: Wrapper | None = None,
    ) -> Update:
        """model already on its device; compile_backend: None (eager), "inductor" (the GPU's, as
        train.compile runs it) or "eager" / "aot_eager" (capture without code generation); or
        `wrapper` (e.g. a DDP) instead of either."""
        device = next(model.parameters()).device
        if compile_backend is not None and wrapper is not None:
            raise ValueError("a compile backend or a wrapper, not both")
        train = dataclasses.replace(params.train, precision=precision, compile=compile_backend == "inductor")
        if compile_backend not in (None, "inductor"):
            wrapper = lambda bare: torch.compile(bare, backend=compile_backend)
        return cls(dataclasses.replace(params, train=train), model.train(), device, wrapper)

    def __call__(self, batch: Batch) -> float:
        result = self.update([batch])  # float(loss): a sync, as in training
        return float("nan") if result is None else result[0] / result[1]
