"""Command `experiments`: every run of the pipeline side by side, from MLflow or from `dvc exp show`.

The table itself is pipeline/reporting/runs.py (why only this command, never
a stage, may call `dvc exp show`: it waits for the lock `dvc repro` holds).
Runs that differ only in train.seed share a row (mean ± standard deviation,
n); `--each-run` keeps them apart. A column per test set holds its BLEU.
`--baseline RUN` adds, per test set, each run's BLEU difference to RUN and a
paired p-value, for the runs whose hypotheses can be found
(pipeline/reporting/hypotheses.py); `compare` shows more.
"""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import hypotheses
from pipeline.reporting.metrics import BOOTSTRAP_SEED, TESTS
from pipeline.reporting.runs import (
    SETTINGS,
    ExperimentsUnavailable,
    dvc_exp_show,
    dvc_table,
    group_seeds,
    mlflow_table,
)
from pipeline.reporting.significance import against_baseline
from pipeline.reporting.tables import experiments_markdown
from pipeline.stages.options import directory, load_params, params_option
from pipeline.tracking.store import tracking_uri

# MLflow's run statuses as the table spells them, and DVC's queue states.
STATUSES = ("finished", "running", "killed", "failed", "scheduled", "queued")


def with_baseline(
    frame: pd.DataFrame,
    baseline: str,
    repo: Path,
    refs_dir: Path,
    test: str = "bs",
    seed: int = BOOTSTRAP_SEED,
) -> pd.DataFrame:
    """The table with BLEU difference and p-value against `baseline` per test set, for every run whose
    hypotheses can be found (MLflow artifacts or DVC outputs); UserError if the baseline's cannot."""
    found = []
    for run_id in frame["id"]:
        try:
            found.append(hypotheses.find(run_id if isinstance(run_id, str) else hypotheses.WORKSPACE, repo))
        except UserError:
            continue  # no hypotheses kept for this run: its cells show –
    return against_baseline(frame, hypotheses.find(baseline, repo), found, refs_dir, test, seed)


def write_table(frame: pd.DataFrame, out: Path) -> None:
    """Markdown for .md (anything else), CSV for .csv; atomically."""
    if out.suffix.lower() == ".csv":
        with files.atomic_path(out) as tmp:
            frame.drop(columns=[SETTINGS], errors="ignore").to_csv(tmp, index=False)
    else:
        files.write_text(out, "# Experiments\n\n" + experiments_markdown(frame) + "\n")


@click.command("experiments")
@params_option
@click.option(
    "--source",
    type=click.Choice(["mlflow", "dvc"]),
    default="mlflow",
    show_default=True,
    help="mlflow: every tracked run; dvc: `dvc exp show` (workspace, baseline, experiments).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the table here: Markdown, or CSV if the name ends in .csv.",
)
@click.option(
    "--all-commits",
    "-A",
    is_flag=True,
    help="With --source dvc: experiments of every commit, not only HEAD's.",
)
@click.option(
    "--baseline",
    default=None,
    help="A run (MLflow run id, DVC experiment, git revision or workspace): add each run's BLEU "
    "difference to it per test set and the p-value of a paired test (python -m pipeline compare has more).",
)
@click.option(
    "--test",
    type=click.Choice(sorted(TESTS)),
    default="bs",
    show_default=True,
    help="With --baseline: bs, paired bootstrap resampling; ar, approximate randomization.",
)
@directory(
    "refs",
    default=Path("data/raw"),
    show_default=True,
    help="With --baseline: the directory with the references test/<name>.tgt.",
)
@click.option(
    "--each-run", is_flag=True, help="A row per run: do not group runs that differ only in train.seed."
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES),
    help="Only runs of this status (repeat for several), e.g. --status finished hides killed and failed.",
)
def command(
    params_file: Path,
    source: str,
    out: Path | None,
    all_commits: bool,
    baseline: str | None,
    test: str,
    refs_dir: Path,
    each_run: bool,
    statuses: tuple[str, ...],
) -> None:
    """Compare experiments: a row per run (seeds grouped), the params that differ, BLEU per test set, size,
    speed."""
    if source == "dvc":
        frame = dvc_table(dvc_exp_show(Path.cwd(), all_commits))
    else:
        experiment = load_params(params_file).tracking.experiment
        try:
            frame = mlflow_table(experiment)
        except ExperimentsUnavailable as e:
            raise UserError(f"{e}; set MLFLOW_TRACKING_URI or run this from the project root") from e
        if frame.empty:
            uri = tracking_uri()
            raise UserError(
                f"no runs in the MLflow experiment {experiment!r} at {uri} yet; run `dvc exp run`"
            )
    if statuses:
        frame = frame[frame["status"].isin(statuses)].reset_index(drop=True)
        if frame.empty:
            raise UserError(f"no {' or '.join(statuses)} runs to show; leave out --status to see every run")
    if baseline is not None:
        frame = with_baseline(frame, baseline, Path.cwd(), refs_dir, test)
    if not each_run:
        frame = group_seeds(frame)
    click.echo(experiments_markdown(frame))
    if out is not None:
        write_table(frame, out)
        click.echo(f"wrote {out}", err=True)
