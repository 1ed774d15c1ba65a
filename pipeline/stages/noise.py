"""Command `noise`: Multi30k with known noise planted among its real pairs, what a cleaning removed
of it, and the report of the models trained on each cleaning (pipeline/experiments/noise.py).

    CORPUS_MIRROR=../shared/corpora python -m pipeline noise make --out data/noise
    python -m pipeline noise removed --noise data/noise --clean data/clean   # what a clean run dropped
    python -m pipeline noise report --refs data/raw   # reports/noise.{md,json} from reports/noise/

How each run of the report was made: docs/cleaning.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from pipeline import files
from pipeline.errors import UserError
from pipeline.experiments import noise


@click.group("noise")
def command() -> None:
    """Plant noise in Multi30k's training pairs, count what cleaning removed of it, report the runs."""


@command.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("data/noise"), show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--share",
    "shares",
    type=(click.Choice(noise.KINDS), click.FloatRange(0, 1)),
    multiple=True,
    help="KIND SHARE, e.g. --share misaligned 0.2 (default: "
    + ", ".join(f"{k} {v}" for k, v in noise.DEFAULT_SHARES.items())
    + ")",
)
def make(out: Path, seed: int, shares: tuple[tuple[str, float], ...]) -> None:
    """Write OUT/train.{de,en} (Multi30k's training pairs with noise planted) and OUT/planted.json."""
    mirror = os.environ.get("CORPUS_MIRROR")
    if not mirror:
        raise UserError("set CORPUS_MIRROR to the corpus mirror (../shared/corpora)")
    real, planted = noise.make(Path(mirror), out, dict(shares), seed)
    added = ", ".join(f"{k} {len(v)}" for k, v in planted.items())
    click.echo(f"{real} real pairs and {added} added -> {out}")


@command.command()
@click.option(
    "--noise", "noise_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data/noise")
)
@click.option("--clean", "clean_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
def removed(noise_dir: Path, clean_dir: Path) -> None:
    """Print, as JSON, the share of each kind of planted noise (and of the clean pairs) that the
    clean stage's output at CLEAN no longer holds."""
    click.echo(json.dumps(noise.removed(noise_dir, clean_dir), indent=2))


@command.command()
@click.option(
    "--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/noise")
)
@click.option(
    "--refs",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="The default run's data/raw: val.tgt and test/<name>.tgt, the references every run was scored on.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("reports/noise.md"))
def report(folder: Path, refs: Path, out: Path) -> None:
    """Write OUT (and its .json): per run of the experiment, what its cleaning removed of each kind
    of noise, and BLEU/chrF on val and the test sets with sacreBLEU's paired bootstrap against the
    clean corpus's run (a) and the noisy one with the base rules (b)."""
    body, markdown = noise.report(folder, refs)
    files.write_json(out.with_suffix(".json"), body)
    files.write_text(out, markdown)
    click.echo(f"wrote {out} and {out.with_suffix('.json')}")
