"""oneDNN's cache of compiled kernels, capped for every process that decodes or trains on the CPU."""

from __future__ import annotations

import os

CACHE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
KERNELS = 64  # oneDNN's own default is 1024


def keep_kernels(n: int = KERNELS) -> None:
    """Cap oneDNN's cache of compiled kernels at `n`, unless the environment sets it.

    oneDNN (torch's CPU bf16 matmuls, and our large float32 products: pipeline/model/linear.py)
    compiles a kernel for every product shape and keeps up to 1,024 of them. Token-budget batches
    come in hundreds of shapes, and beam search meets a new one whenever its number of live
    hypotheses changes: a bf16 training process grew by gigabytes of that cache, a served model by
    about 0.6 MB a shape; 64 entries were no slower (docs/cpu-speed.md, docs/mlflow.md). It changes
    no result. oneDNN reads the setting at its first product in the process, so call this before:
    later, the process keeps the setting it started with.
    """
    os.environ.setdefault(CACHE, str(n))
