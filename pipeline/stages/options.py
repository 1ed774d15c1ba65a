"""What the stage commands share: the --params option and loading it once, their directory options, and
running another stage's command as a child (the reverse and student stages do)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pipeline import params as P

F = TypeVar("F", bound=Callable[..., Any])


def params_file(help: str) -> Callable[[F], F]:
    """A --params option naming a params file, passed as params_file."""
    return click.option(
        "--params",
        "params_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default="params.yaml",
        show_default=True,
        help=help,
    )


params_option = params_file("The params file (dvc.yaml passes the repository's).")
# The experiment commands': the file each experiment starts from and is checked against before it is queued
experiments_params_option = params_file(
    "The params every experiment starts from and is checked against (DVC runs it over the workspace's "
    "params.yaml)."
)


def directory(name: str, help: str, **kwargs: Any) -> Callable[[F], F]:
    """A --NAME option naming a directory, passed as NAME_dir: how the stages name their inputs."""
    path = click.Path(file_okay=False, path_type=Path)
    return click.option(f"--{name}", f"{name.replace('-', '_')}_dir", type=path, help=help, **kwargs)


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


def run_stage(who: str, command: str, *args: str | Path) -> None:
    """One stage's command, as dvc.yaml runs it, in a child process; its failure is this stage's,
    reported as `who` (formatted with the command) says.

    While it runs, Ctrl-C reaches it from the terminal (both are in its process group; this one
    waits) and a SIGTERM (`dvc queue kill`, a scheduler) is passed on to it, so a training stops
    between updates with whole checkpoints, as it does alone."""
    child: subprocess.Popen[bytes] | None = None
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(*_: Any) -> None:
        if child is None:  # before the child started: stop here
            raise SystemExit(128 + signal.SIGTERM)
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    try:
        child = subprocess.Popen([sys.executable, "-m", "pipeline", command, *map(str, args)])
        code = child.wait()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if code:
        click.echo(f"{who.format(command=command)} failed (exit {code})", err=True)
        raise SystemExit(code if code > 0 else 128 - code)  # killed by signal n: 128 + n, as a shell says
