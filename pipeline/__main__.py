"""`python -m pipeline ...`: the process's settings, then the command line (pipeline/cli.py)."""

import os

# oneDNN (torch's CPU bf16 matmuls) caches a compiled kernel per matrix shape, up to
# 1024 of them. Token-budget batches come in hundreds of shapes, so a bf16 training
# process grew by gigabytes of that cache; 64 entries were no slower (docs/cpu-speed.md).
# It changes no result. An explicit setting in the environment wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

from pipeline.cli import cli

cli(prog_name="python -m pipeline")
