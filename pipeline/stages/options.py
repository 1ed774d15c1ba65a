"""What the stage commands share: the --params option and loading it once, and their directory options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pipeline import params as P

F = TypeVar("F", bound=Callable[..., Any])

params_option = click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="params.yaml",
    show_default=True,
    help="The params file (dvc.yaml passes the repository's).",
)


def directory(name: str, help: str, **kwargs: Any) -> Callable[[F], F]:
    """A --NAME option naming a directory, passed as NAME_dir: how the stages name their inputs."""
    path = click.Path(file_okay=False, path_type=Path)
    return click.option(f"--{name}", f"{name}_dir", type=path, help=help, **kwargs)


clean_option = directory("clean", "The clean stage's output directory.", required=True)
bpe_option = directory("bpe", "The bpe stage's output directory.", required=True)
model_option = directory("model", "The train stage's model directory (data/model).", required=True)


def out_dir_option(what: str) -> Callable[[F], F]:
    """The required --out of the commands that write one directory (replaced atomically)."""
    return directory("out", f"Where to write the {what} directory (replaced atomically).", required=True)


refs_option = directory(
    "refs",
    "Directory with the references val.tgt and test/<name>.tgt (data/raw).",
    default=Path("data/raw"),
    show_default=True,
)


def load_params(params_file: Path) -> P.Params:
    """Load and validate; a bad key or value exits 2 with a one-line message."""
    return P.load(params_file)
