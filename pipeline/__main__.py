from pipeline.cli import cli

cli(prog_name="python -m pipeline")
