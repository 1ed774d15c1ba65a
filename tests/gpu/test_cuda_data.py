"""Batches reach the GPU intact: from pinned memory with non_blocking copies (which overlap with the
GPU's work), and from pageable memory as the Trainer copies them today (non_blocking=True there
falls back to a synchronous copy)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipeline.data.batching import ParallelData, collate
from tests.gpu.corpus import write_binarized

pytestmark = pytest.mark.cuda

FIELDS = ("src", "tgt_in", "tgt_out")


@pytest.mark.parametrize("pinned", [True, False])
def test_a_batch_copied_non_blocking_arrives_intact(pinned, tmp_path, cuda):
    write_binarized(tmp_path / "bin", 500, {"train": 64, "val": 4, "test": 4})
    data = ParallelData.load(tmp_path / "bin", "train")
    batch = collate(data, range(64))
    if pinned:
        batch = dataclasses.replace(batch, **{f: getattr(batch, f).pin_memory() for f in FIELDS})
        assert batch.src.is_pinned()
    on_gpu = batch.to(cuda, non_blocking=True)
    busy = torch.randn(2048, 2048, device=cuda) @ torch.randn(2048, 2048, device=cuda)  # work to overlap
    torch.cuda.synchronize(cuda)
    for f in FIELDS:
        assert getattr(on_gpu, f).device.type == "cuda"
        assert torch.equal(getattr(on_gpu, f).cpu(), getattr(batch, f))
    assert on_gpu.n_tgt_tokens == batch.n_tgt_tokens and busy.isfinite().all()
