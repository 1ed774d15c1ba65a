"""What every stage command shares: the --params option and loading it once."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import params as P

params_option = click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="params.yaml",
    show_default=True,
    help="The params file (dvc.yaml passes the repository's).",
)


def load_params(params_file: Path) -> P.Params:
    """Load and validate; a bad key or value exits 2 with a one-line message."""
    return P.load(params_file)
