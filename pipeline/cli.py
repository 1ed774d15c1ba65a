"""`python -m pipeline <command>`: one click command per stage, as dvc.yaml runs them.

Each command's module is imported only when that command runs, so `download`
or `clean` never import torch or matplotlib.
"""

from __future__ import annotations

import importlib

import click

# command name -> the module under pipeline/stages/ that defines it as `command`
COMMANDS = {
    "download": "download",
    "clean": "clean",
    "bpe": "bpe",
    "binarize": "binarize",
    "reverse": "reverse",
    "backtranslate": "backtranslate",
    "teachers": "teachers",
    "distill": "distill",
    "student": "student",
    "train": "train",
    "decode": "decode",
    "score": "score",
    "report": "report",
    "translate": "translate",
    "experiments": "experiments",
    "compare": "compare",
    "recipes": "recipes",
    "ablation": "ablation",
    "noise": "noise",
    "corpora": "corpora",
    "export-ct2": "export_ct2",
    "import-hf": "import_hf",
    "export-hf": "export_hf",
    "ui": "ui",
    "score-pairs": "score_pairs",
}


class LazyGroup(click.Group):
    """A group that imports a command's module when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"pipeline.stages.{COMMANDS[cmd_name]}")
        return module.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Transformer NMT pipeline: each command is one DVC stage (see dvc.yaml)."""
