"""Command `score-pairs`: each training pair's cross-entropy under a model, or the dual conditional
cross-entropy under a forward and a reverse model (pipeline/decoding/pair_scores.py).

    python -m pipeline score-pairs --model data/model --reverse data/reverse \\
        --src data/clean/train.src --tgt data/clean/train.tgt --out data/scores.txt

One score a line, in the pairs' order; higher is worse (a pair the models find unlikely, as a
misaligned one is). Not a DVC stage yet: the clean stage does not read the scores. It prints the
pairs scored per second, and torch's threads, so that its cost on a corpus can be estimated.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np
import torch

from pipeline import files
from pipeline.data.vocab import Vocab
from pipeline.decoding.pair_scores import cross_entropies, dual_cross_entropy
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.model.transformer import Seq2SeqBase
from pipeline.stages.options import model_option


def score_pairs(
    model_dir: Path, reverse_dir: Path | None, src: list[str], tgt: list[str], batch_tokens: int
) -> np.ndarray:
    """The pairs' cross-entropies under model_dir's model, or their dual cross-entropy with reverse_dir's."""
    forward, vocab = _load(model_dir)
    scores = cross_entropies(forward, vocab.encode_src(src), vocab.encode_tgt(tgt), batch_tokens)
    if reverse_dir is None:
        return scores
    reverse, rvocab = _load(reverse_dir)
    back = cross_entropies(reverse, rvocab.encode_src(tgt), rvocab.encode_tgt(src), batch_tokens)
    return dual_cross_entropy(scores, back)


def _load(model_dir: Path) -> tuple[Seq2SeqBase, Vocab]:
    """A model directory's one model (no ensemble: its own settings name none) and vocabulary."""
    translator = Translator.from_dir(model_dir, device="cpu", workers=1)
    assert isinstance(translator.model, Seq2SeqBase)
    return translator.model, translator.vocab


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
def command(
    model_dir: Path, reverse_dir: Path | None, src: Path, tgt: Path, out: Path, batch_tokens: int
) -> None:
    """Score each pair of SRC and TGT by how well the model(s) explain it; one score a line to OUT."""
    src_lines, tgt_lines = files.read_lines(src), files.read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise UserError(
            f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}; give aligned files"
        )
    start = time.perf_counter()
    scores = score_pairs(model_dir, reverse_dir, src_lines, tgt_lines, batch_tokens)
    seconds = time.perf_counter() - start
    files.write_lines(out, [f"{s:.4f}" for s in scores])
    click.echo(
        f"scored {len(scores)} pairs in {seconds:.1f} s: {len(scores) / max(seconds, 1e-9):,.0f} pairs/s "
        f"on {torch.get_num_threads()} torch threads -> {out}",
        err=True,
    )
