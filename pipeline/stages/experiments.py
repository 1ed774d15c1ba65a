"""Experiments table: every run of the pipeline side by side, from MLflow or from `dvc exp show`.

Both sources give one table shape: a row per run with `ID_COLUMNS`, then the
params whose values differ between the rows (flat keys such as
`model.n_layers`), then `METRIC_COLUMNS`; best test BLEU first.

- MLflow (`mlflow_table`): every run of the params' `tracking.experiment` in
  the store `tracking.tracking_uri()` names. Safe inside a DVC stage, so the
  report stage uses this one.
- DVC (`dvc_table`, over the parsed output of `dvc exp show --json`): the
  workspace, the baseline commit and its experiments, queued ones included.
  `dvc exp show` waits for the repository lock that `dvc repro` and
  `dvc exp run` hold while a stage runs, so only the `experiments` command,
  run by a user, calls it; a stage must never.
"""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from pipeline import files, tracking
from pipeline.errors import UserError
from pipeline.reporting.runs import ExperimentsUnavailable, dvc_exp_show, dvc_table, mlflow_table
from pipeline.reporting.tables import experiments_markdown
from pipeline.stages.options import load_params, params_option

# --- one table from either source ------------------------------------------------


# --- MLflow ------------------------------------------------------------------------


# --- DVC ---------------------------------------------------------------------------


# --- command -----------------------------------------------------------------------


def write_table(frame: pd.DataFrame, out: Path) -> None:
    """Markdown for .md (anything else), CSV for .csv; atomically."""
    if out.suffix.lower() == ".csv":
        with files.atomic_path(out) as tmp:
            frame.to_csv(tmp, index=False)
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
def command(params_file: Path, source: str, out: Path | None, all_commits: bool) -> None:
    """Compare experiments: a row per run, the params that differ, scores, size and speed."""
    if source == "dvc":
        frame = dvc_table(dvc_exp_show(Path.cwd(), all_commits))
    else:
        experiment = load_params(params_file).tracking.experiment
        try:
            frame = mlflow_table(experiment)
        except ExperimentsUnavailable as e:
            raise UserError(f"{e}; set MLFLOW_TRACKING_URI or run this from the project root") from e
        if frame.empty:
            uri = tracking.tracking_uri()
            raise UserError(
                f"no runs in the MLflow experiment {experiment!r} at {uri} yet; run `dvc exp run`"
            )
    click.echo(experiments_markdown(frame))
    if out is not None:
        write_table(frame, out)
        click.echo(f"wrote {out}", err=True)
