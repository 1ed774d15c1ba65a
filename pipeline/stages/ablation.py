"""Command `ablation`: the architecture ablation at the full default budget, as DVC experiments.

    python -m pipeline ablation queue   # one `dvc exp run --queue -n abl-<variant> -S ...` per variant
    dvc queue start -j 1                # run them one at a time (dvc queue status to follow)
    python -m pipeline ablation table   # reports/ablation.{md,json}, from MLflow and reports/ablation/runs/

A variant is the default params.yaml plus its settings (experiments/ablation.yaml); the baseline
is the default pipeline's own run (`dvc repro`). The table: pipeline/experiments/ablation.py.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import click

from pipeline import files
from pipeline.experiments import ablation
from pipeline.experiments.ablation import VARIANTS
from pipeline.experiments.recipes import read_raw, settings
from pipeline.stages.options import experiments_params_option, load_params, refs_option


@click.group("ablation")
def command() -> None:
    """Queue the ablation experiments, or tabulate their results."""


@command.command()
@click.argument("names", nargs=-1, type=click.Choice(sorted(VARIANTS)), metavar="[VARIANT]...")
@experiments_params_option
@click.option("--dry-run", is_flag=True, help="Print the commands instead of queueing them.")
def queue(names: tuple[str, ...], params_file: Path, dry_run: bool) -> None:
    """Queue one full-pipeline `dvc exp run` per variant (all, or those named); then `dvc queue start -j 1`.

    The baseline is not queued: it is the default pipeline's own run (`dvc repro`).
    """
    for name, args in ablation.queue_commands(read_raw(params_file), names):
        if dry_run:
            click.echo(shlex.join(["dvc", *args[1:]]))
            continue
        subprocess.run(args, check=True)
        click.echo(f"queued {name}: {' '.join(settings(VARIANTS[name].changes))}")


@command.command()
@click.option("--baseline", "baseline_ref", default=None, help="MLflow run id or DVC experiment name.")
@experiments_params_option
@refs_option
@click.option("--out", type=click.Path(path_type=Path), default="reports/ablation.md", show_default=True)
@click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the runs are kept in git (read, then updated) [default: OUT without suffix/runs, "
    "reports/ablation/runs].",
)
@click.option(
    "--note",
    "notes",
    multiple=True,
    help="A note of yours for the table's notes (repeatable), e.g. what else ran beside a run.",
)
def table(
    baseline_ref: str | None,
    params_file: Path,
    refs_dir: Path,
    out: Path,
    archive: Path | None,
    notes: tuple[str, ...],
) -> None:
    """Write the ablation table from the baseline's and each variant's latest scored run in MLflow
    and in the archive, and keep those runs in the archive."""
    archive = archive or out.with_suffix("") / "runs"
    result = ablation.collect(load_params(params_file), refs_dir, baseline_ref, archive)
    result.notes += notes
    ablation.keep_runs(result, archive)
    files.write_text(out, ablation.render(result))
    files.write_json(out.with_suffix(".json"), result.to_json())
    click.echo(f"wrote {out} and {out.with_suffix('.json')}")
