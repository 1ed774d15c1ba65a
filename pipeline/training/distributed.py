"""Data parallel training: where this process sits in a torchrun job, and the collectives it uses.

Each rank trains on its share of every epoch's batch list, and an update's
loss is normalized by its target tokens summed over all ranks, so N ranks with
update_freq u take the same steps as one process with update_freq N*u. Only
rank 0 validates and writes. Without torchrun every helper here is a no-op.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist


@dataclass(frozen=True)
class Dist:
    """Where this process sits in a torchrun job (rank 0 of 1 without one)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_sum(self, value: torch.Tensor) -> torch.Tensor:
        """`value` summed over the ranks, in place."""
        if self.enabled:
            torch_dist.all_reduce(value)
        return value

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, by rank (picklable objects)."""
        if not self.enabled:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        torch_dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (the others pass anything, e.g. None)."""
        if not self.enabled:
            return obj
        box = [obj]
        torch_dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            torch_dist.barrier()


ALONE = Dist()  # one process, no torchrun


def init_distributed(device: str) -> Dist:
    """Join the torchrun job that WORLD_SIZE/RANK/LOCAL_RANK describe, if any."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Dist()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    torch_dist.init_process_group("nccl" if cuda else "gloo")
    return Dist(rank, world_size, local_rank)


def close_distributed(dist: Dist) -> None:
    """Destroy the process group, after collecting what may still hold its pending work (DDP's reducer)."""
    if dist.enabled and torch_dist.is_initialized():
        gc.collect()
        torch_dist.destroy_process_group()
