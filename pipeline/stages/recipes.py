"""Command `recipes`: queue a pair's recipes and sweeps as DVC experiments, and tabulate their runs.

    python -m pipeline recipes queue --pair ru-en --recipe lowres         # one full-pipeline run
    python -m pipeline recipes sweep --pair ru-en --from lowres --steps 3000   # one change at a time
    dvc queue start -j 1                                                  # then run them in turn
    python -m pipeline recipes table                                      # reports/pairs.{md,json}

A recipe is a YAML file of settings in experiments/recipes/ over its pair's base (experiments/
pairs.yaml); a sweep's axes are experiments/grid.yaml. What each step does, and how the table
is made from MLflow and the archive of finished runs: pipeline/experiments/pairs.py and
docs/experiments.md.
"""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from pipeline import files
from pipeline.experiments import archive as run_archive
from pipeline.experiments import pairs
from pipeline.experiments.pairs import PAIRS, RECIPES, TABLE
from pipeline.experiments.recipes import read_raw
from pipeline.stages.options import experiments_params_option

PAIR_OPTION = click.option("--pair", required=True, type=click.Choice(sorted(PAIRS)))


@click.group("recipes")
def command() -> None:
    """Queue the pairs' recipes and sweeps as DVC experiments, or tabulate their results."""


def name_value(text: str) -> tuple[str, object]:
    """section.key=value, the value read as YAML (as `dvc exp run -S` reads it)."""
    key, sep, value = text.partition("=")
    if not sep or "." not in key:
        raise click.BadParameter(f"{text!r}: expected section.key=value")
    return key, yaml.safe_load(value)


@command.command()
@PAIR_OPTION
@click.option("--recipe", default=pairs.BASELINE, show_default=True, type=click.Choice(sorted(RECIPES)))
@click.option("--steps", type=click.IntRange(min=1), default=None, help="A ranking run: train.max_steps=N.")
@click.option("--set", "extra", multiple=True, help="A further section.key=value (repeatable); needs --name.")
@click.option("--name", default=None, help="The experiment's name (with --set); it must start with PAIR-.")
@click.option(
    "--parent",
    default=None,
    metavar="EXPERIMENT",
    help="With --recipe parent: start from this finished experiment of the pair instead of the recipe's.",
)
@click.option(
    "--ensemble",
    "members",
    multiple=True,
    metavar="EXPERIMENT",
    help="Decode with this finished experiment's model too (decode.ensemble; repeatable; needs --name).",
)
@experiments_params_option
@click.option("--dry-run", is_flag=True, help="Print the command instead of queueing it.")
def queue(
    pair: str,
    recipe: str,
    steps: int | None,
    extra: tuple[str, ...],
    name: str | None,
    parent: str | None,
    members: tuple[str, ...],
    params_file: Path,
    dry_run: bool,
) -> None:
    """Queue one full-pipeline experiment: the pair's baseline plus a recipe (plus --set changes, plus
    --ensemble members)."""
    exp = pairs.recipe_experiment(pair, recipe, steps, parent)
    exp = pairs.custom_experiment(exp, name, dict(name_value(x) for x in extra), members)
    pairs.enqueue([exp], read_raw(params_file), dry_run)


@command.command()
@PAIR_OPTION
@click.option("--from", "recipe", default="lowres", show_default=True, type=click.Choice(sorted(RECIPES)))
@click.option("--steps", type=click.IntRange(min=1), required=True, help="Each run's train.max_steps.")
@click.option(
    "--only", multiple=True, metavar="AXIS[=VALUE]", help="Only this axis, or one value of it (repeatable)."
)
@experiments_params_option
@click.option("--dry-run", is_flag=True, help="Print the commands instead of queueing them.")
def sweep(
    pair: str, recipe: str, steps: int, only: tuple[str, ...], params_file: Path, dry_run: bool
) -> None:
    """Queue the recipe's ranking run and one variant per value of each grid axis, all capped at --steps."""
    raw = read_raw(params_file)
    pairs.enqueue(pairs.sweep_experiments(raw, pair, recipe, steps, only), raw, dry_run, skip_taken=True)


@command.command()
@experiments_params_option
@click.option(
    "--refs",
    "refs",
    multiple=True,
    metavar="PAIR=DIR",
    help="A pair's test references: DIR/test/<name>.tgt, as the download stage writes them (repeatable). "
    "Otherwise they are read from the catalog (CORPUS_MIRROR or data.mirror, else the network).",
)
@click.option("--out", type=click.Path(path_type=Path), default=str(TABLE), show_default=True)
@click.option("--note", "notes", multiple=True, help="A note of yours for the table (repeatable).")
@click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where finished runs are kept in git (read, then updated) [default: OUT without suffix/runs, "
    "reports/pairs/runs].",
)
def table(
    params_file: Path, refs: tuple[str, ...], out: Path, notes: tuple[str, ...], archive: Path | None
) -> None:
    """Write reports/pairs.json and .md from every pair's experiments in MLflow and in the archive."""
    given = {}
    for item in refs:
        pair, sep, where = item.partition("=")
        if not sep or pair not in PAIRS:
            raise click.BadParameter(f"{item!r}: expected PAIR=DIR with PAIR one of {sorted(PAIRS)}")
        given[pair] = Path(where)
    archive = archive or out.with_suffix("") / "runs"
    report = pairs.collect(params_file, given, archive)
    report.notes += notes
    pairs.archive_new_runs(report, archive)
    files.write_json(out.with_suffix(".json"), run_archive.repo_relative(report.to_json()))
    files.write_text(out, run_archive.repo_relative(pairs.render(report)))
    click.echo(f"wrote {out.with_suffix('.json')} and {out}")
