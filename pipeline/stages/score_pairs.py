"""Command `score-pairs`: each training pair's cross-entropy under a model, or the dual conditional
cross-entropy under a forward and a reverse model (pipeline/decoding/pair_scores.py).

    python -m pipeline score-pairs --model data/model --reverse data/reverse \\
        --src data/clean/train.src --tgt data/clean/train.tgt --out data/scores.txt

One score a line, in the pairs' order; higher is worse (a pair the models find unlikely, as a
misaligned one is). The clean stage's score rule drops pairs by the same score (clean.score in
params.yaml); this command shows the scores themselves, and prints the pairs scored per second and
torch's threads, so that the rule's cost on a corpus can be estimated.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import torch

from pipeline import files
from pipeline.decoding.pair_scores import PairScorer
from pipeline.errors import UserError
from pipeline.stages.options import model_option


@click.command("score-pairs")
@model_option
@click.option(
    "--reverse",
    "reverse_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A model translating the other way: the score becomes the dual conditional cross-entropy.",
)
@click.option("--src", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--tgt", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--batch-tokens", type=click.IntRange(min=1), default=4000, show_default=True)
@click.option(
    "--relative",
    is_flag=True,
    help="Divide each cross-entropy by the model's with no source (clean.score.relative).",
)
def command(
    model_dir: Path,
    reverse_dir: Path | None,
    src: Path,
    tgt: Path,
    out: Path,
    batch_tokens: int,
    relative: bool,
) -> None:
    """Score each pair of SRC and TGT by how well the model(s) explain it; one score a line to OUT."""
    src_lines, tgt_lines = files.read_lines(src), files.read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise UserError(
            f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}; give aligned files"
        )
    start = time.perf_counter()
    scores = PairScorer(model_dir, reverse_dir, batch_tokens, relative)(src_lines, tgt_lines)
    seconds = time.perf_counter() - start
    files.write_lines(out, [f"{s:.4f}" for s in scores])
    click.echo(
        f"scored {len(scores)} pairs in {seconds:.1f} s: {len(scores) / max(seconds, 1e-9):,.0f} pairs/s "
        f"on {torch.get_num_threads()} torch threads -> {out}",
        err=True,
    )
