"""A few data-parallel updates under torchrun: the process group, DDP's gradient all-reduce, and one
all_reduce whose result is known; rank 0 writes what it saw to --out as JSON.

    torchrun --standalone --nproc_per_node 1 -m tests.gpu.ddp_probe --backend nccl --out probe.json

The train stage starts no process group when WORLD_SIZE is 1 (init_distributed in
pipeline/training/distributed.py), so on a one-GPU machine this probe is what runs NCCL.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import click
import torch
import torch.distributed as dist

from bench.common import TINY
from pipeline import params as P
from pipeline.model.transformer import build_model
from tests.gpu.corpus import synthetic_batch
from tests.gpu.step import Update

REPO = Path(__file__).resolve().parents[2]


def nccl_version() -> str:
    version = torch.cuda.nccl.version()  # a tuple in recent torch, an int in older ones
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


@click.command()
@click.option("--backend", type=click.Choice(["nccl", "gloo"]), required=True)
@click.option("--steps", type=int, default=5, show_default=True)
@click.option("--tiny", is_flag=True, help="A tiny model (the CPU rehearsal) instead of params.yaml's.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def main(backend: str, steps: int, tiny: bool, out: Path) -> None:
    """Join the torchrun job, take `steps` DDP updates in bf16 on a synthetic batch, report."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    try:
        params = P.load(REPO / "params.yaml")
        cfg = TINY.of(params.model) if tiny else params.model
        vocab = 300 if tiny else 8000
        torch.manual_seed(1)
        model = build_model(cfg, vocab, vocab).to(device)
        params = dataclasses.replace(params, train=dataclasses.replace(params.train, warmup_steps=1))
        ids = [local_rank] if device.type == "cuda" else None
        ddp = lambda bare: torch.nn.parallel.DistributedDataParallel(bare, device_ids=ids)
        update = Update.build(model, params, "bf16", wrapper=ddp)
        batch = synthetic_batch(vocab, rows=8 if tiny else 64, length=12 if tiny else 24, seed=rank)
        losses = [update(batch) for _ in range(steps)]
        ones = torch.ones(4, device=device)
        dist.all_reduce(ones)
        report = {
            "backend": dist.get_backend(),
            "world_size": world_size,
            "device": str(device),
            "nccl_version": nccl_version() if backend == "nccl" else None,
            "losses": losses,
            "finite": all(math.isfinite(x) for x in losses),
            "all_reduce_ok": bool(torch.all(ones == world_size)),
        }
        if rank == 0:
            out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
