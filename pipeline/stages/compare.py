"""Command `compare`: runs against a baseline per test set, with sacreBLEU's paired significance tests.

Not a DVC stage: a user runs it on finished runs, named by MLflow run id, DVC
experiment name or git revision (pipeline/reporting/hypotheses.py finds their
hypotheses), against the workspace's references; it prints a Markdown table
for val and per test set they share, and names the sets it skipped and why
(pipeline/reporting/significance.py).
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.errors import UserError
from pipeline.reporting import hypotheses
from pipeline.reporting.metrics import BOOTSTRAP_SEED, TESTS
from pipeline.reporting.significance import compare, comparison_markdown
from pipeline.stages.options import refs_option


def compare_runs(
    refs: list[str],
    refs_dir: Path,
    repo: Path,
    test: str = "bs",
    seed: int = BOOTSTRAP_SEED,
    n: int | None = None,
) -> str:
    """The comparison of refs[1:] against refs[0], as Markdown."""
    repeated = sorted({r for r in refs if refs.count(r) > 1})
    if repeated:
        raise UserError(f"{', '.join(repeated)} named twice; name each run once")
    runs = [hypotheses.find(ref, repo) for ref in refs]
    return comparison_markdown(compare(runs[0], runs[1:], refs_dir, test, seed, n))


@click.command("compare")
@click.argument("baseline")
@click.argument("candidates", nargs=-1, required=True, metavar="CANDIDATE...")
@click.option(
    "--test",
    type=click.Choice(sorted(TESTS)),
    default="bs",
    show_default=True,
    help="bs: paired bootstrap resampling; ar: approximate randomization (sacreBLEU's --paired-bs/-ar).",
)
@click.option(
    "--samples",
    "n",
    type=click.IntRange(min=1),
    default=None,
    help="Bootstrap resamples (bs, default 1000) or randomization trials (ar, default 10000).",
)
@click.option(
    "--seed", type=click.IntRange(min=1), default=BOOTSTRAP_SEED, show_default=True, help="Seed of the test."
)
@refs_option
def command(
    baseline: str, candidates: tuple[str, ...], test: str, n: int | None, seed: int, refs_dir: Path
) -> None:
    """Compare CANDIDATE runs with BASELINE: BLEU and chrF per test set, differences and paired p-values.

    Each run is an MLflow run id, a DVC experiment name, a git revision or `workspace`.
    """
    click.echo(compare_runs([baseline, *candidates], refs_dir, Path.cwd(), test, seed, n))
