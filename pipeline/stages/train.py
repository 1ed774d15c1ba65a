"""Stage `train`: a Transformer on the binarized corpus, with exact resume, early stopping and MLflow.

    python -m pipeline train --params params.yaml --bin data/bin --bpe data/bpe \\
        --out data/model --checkpoints data/checkpoints --log reports/train

Data parallel over N GPUs (NCCL) or N CPU processes (gloo), same options:

    torchrun --standalone --nproc_per_node N -m pipeline -- train --params params.yaml --bin data/bin ...

(the `--` keeps torchrun from taking --log for its own --log-dir).

What it writes, and how a killed run resumes: pipeline/training/ and docs/exact-resume.md.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from pipeline import params as P
from pipeline.model.transformer import count_parameters
from pipeline.stages.options import directory, load_params, params_option
from pipeline.training.distributed import Dist, close_distributed, init_distributed
from pipeline.training.loop import Trainer
from pipeline.training.signals import Stopped, stop_on_signals
from pipeline.training.state import Paths, remove_stale_temps


def train(
    params: P.Params, paths: Paths, *, on_change: str = "refuse", tracking: bool = True
) -> dict[str, Any] | None:
    """Train (or resume, or just rebuild a finished run's outputs); -> summary.json's content on rank 0."""
    dist = init_distributed(params.train.device)
    try:
        # The Trainer (and its DDP wrapper) lives only inside _run, so it is freed before the process
        # group it uses is destroyed: a gloo rank that freed DDP after that sometimes aborted at exit.
        return _run(params, paths, dist, on_change, tracking)
    finally:
        close_distributed(dist)


def _run(params: P.Params, paths: Paths, dist: Dist, on_change: str, tracking: bool) -> dict[str, Any] | None:
    if dist.main:
        remove_stale_temps(paths)
    trainer = Trainer(params, paths, dist)
    trainer.state.resume(on_change, trainer.say)
    if dist.main:
        trainer.say(
            f"train: {count_parameters(trainer.model):,} parameters, {trainer.n_batches} batches per "
            f"epoch, {dist.world_size} process(es) on {trainer.device}, {trainer.params.train.precision}"
        )
    with trainer.open_observer(tracking):
        trainer.run()
        summary = trainer.finish() if dist.main else None
    dist.barrier()
    return summary


@click.command("train")
@params_option
@directory(
    "bin",
    required=True,
    help="The binarize stage's output directory.",
)
@directory(
    "bpe",
    required=True,
    help="The bpe stage's output directory (its models are copied into --out).",
)
@directory(
    "clean",
    default=None,
    help="The clean stage's output: its train text, for train.subword_sampling to segment each epoch.",
)
@directory(
    "out",
    required=True,
    help="Where to write the final model directory.",
)
@click.option(
    "--checkpoints",
    "ckpt_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Training state and checkpoints, kept across runs to resume.",
)
@directory(
    "log",
    required=True,
    help="Where to write steps.tsv, valid.tsv and summary.json.",
)
@click.option(
    "--on-change",
    type=click.Choice(["refuse", "restart"]),
    default="refuse",
    show_default=True,
    help="When the checkpoints are from other params or data: refuse, or delete them and start afresh.",
)
@click.option(
    "--tracking/--no-tracking",
    default=True,
    show_default=True,
    help="Log the run to MLflow (MLFLOW_TRACKING_URI, else ./mlflow.db).",
)
def command(
    params_file: Path,
    bin_dir: Path,
    bpe_dir: Path,
    clean_dir: Path | None,
    out_dir: Path,
    ckpt_dir: Path,
    log_dir: Path,
    on_change: str,
    tracking: bool,
) -> None:
    """Train the model; resumes from --checkpoints/last.pt when it exists."""
    params = load_params(params_file)
    paths = Paths(bin_dir, bpe_dir, out_dir, ckpt_dir, log_dir, clean_dir)
    try:
        with stop_on_signals():
            summary = train(params, paths, on_change=on_change, tracking=tracking)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (a scheduler, `dvc queue kill`, torchrun)
        stopped = e if isinstance(e, Stopped) else Stopped(signal.SIGINT)
        click.echo(
            f"train: stopped by {stopped}; the checkpoints in {ckpt_dir} are whole: rerun the same "
            "command to resume",
            err=True,
        )
        raise SystemExit(stopped.exit_code) from None
    if summary is not None:
        bleu, loss = summary["best_val_bleu"], summary["best_val_loss"]
        best = f"val BLEU {bleu:.2f}" if bleu is not None else f"val loss {loss}"
        click.echo(
            f"train: {summary['steps']} updates, stopped by {summary['stopped']}; best "
            f"{best} at step {summary['best_step']} -> {out_dir}"
        )
