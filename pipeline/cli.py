"""`python -m pipeline <stage>`: one click command per stage, as dvc.yaml runs them."""

import click

from pipeline import binarize, bpe, clean, ct2, decode, download, experiments, report, score, train, translate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Transformer NMT pipeline: each command is one DVC stage (see dvc.yaml)."""


for _module in (download, clean, bpe, binarize, train, decode, score, report, translate, experiments):
    cli.add_command(_module.command)
cli.add_command(ct2.export_command)
