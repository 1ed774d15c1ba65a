"""`python -m pipeline ...`: the process's settings, then the command line (pipeline/cli.py)."""

from pipeline.onednn import keep_kernels

keep_kernels()  # before any oneDNN product; an explicit setting in the environment wins

from pipeline.cli import cli  # noqa: E402

cli(prog_name="python -m pipeline")
