"""The train stage's own update (pipeline.training.step.UpdateStep), as the GPU check times it.

`Update.build` makes the UpdateStep training runs, for a given precision; a
compile backend other than the default (dynamo's "eager" capture, for the CPU
rehearsal) wraps its model through UpdateStep.wrap. Calling it takes one update
and returns the loss per target token.
"""

from __future__ import annotations

import dataclasses

import torch

from pipeline import params as P
from pipeline.data.batching import Batch
from pipeline.model.transformer import Seq2SeqBase
from pipeline.training.step import UpdateStep


class Update(UpdateStep):
    """An UpdateStep called on one batch at a time: -> its loss per target token (nan if skipped)."""

    @classmethod
    def build(
        cls, model: Seq2SeqBase, params: P.Params, precision: P.Precision, compile_backend: str | None = None
    ) -> Update:
        """model already on its device; compile_backend: None (eager), "inductor" (the GPU's, as
        train.compile runs it) or "eager" / "aot_eager" (capture without code generation)."""
        device = next(model.parameters()).device
        train = dataclasses.replace(params.train, precision=precision, compile=compile_backend == "inductor")
        step = cls(dataclasses.replace(params, train=train), model.train(), device)
        if compile_backend not in (None, "inductor"):
            step.wrap(lambda bare: torch.compile(bare, backend=compile_backend))
        return step

    def __call__(self, batch: Batch) -> float:
        result = self.update([batch])  # float(loss): a sync, as in training
        return float("nan") if result is None else result[0] / result[1]
