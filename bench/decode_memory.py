"""Where a long-lived decoder's memory goes: resident memory after each batch of new sentences.

    python -m bench.decode_memory --model data/model \\
        --split-file data/clean/test/multi30k-test_2016_flickr.src --batches 10 --lines 64
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 python -m bench.decode_memory ...   # oneDNN's own default

One process translates --batches batches of --lines sentences each (sentences it has not seen,
the model's decode settings), as a served model does, and prints its RSS after each batch, then
again after handing the heap's free pages back to the system (`release_free_memory`, what the
served model's batcher does when idle), with the number of float32 product shapes oneDNN has met
so far (each one a compiled kernel in its cache, up to ONEDNN_PRIMITIVE_CACHE_CAPACITY). The model
loads as the served model does (pipeline.serving.pyfunc.TranslatorModel), so the cache holds
its model_config's onednn_kernels unless the environment sets the capacity; the table says which.
RSS after the trim that keeps rising batch after batch is memory held, not freed heap.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import click
import psutil
import torch

from pipeline.files import read_lines
from pipeline.machine import machine_info
from pipeline.model import linear
from pipeline.onednn import CACHE
from pipeline.reporting.tables import markdown_table
from pipeline.serving import pyfunc


@contextlib.contextmanager
def product_shapes() -> Iterator[set[tuple]]:
    """Within: the shapes of the products `linear` sends to oneDNN go into the set yielded."""
    seen: set[tuple] = set()
    onednn = linear._onednn

    def recording(x, weight, bias, relu):
        seen.add((x.shape[0], tuple(weight.shape), bias is not None, relu))
        return onednn(x, weight, bias, relu)

    linear._onednn = recording
    try:
        yield seen
    finally:
        linear._onednn = onednn


HEADER = ("batch", "RSS, MB", "RSS after the trim, MB", "oneDNN product shapes met")


def measure(model_dir: Path, sentences: list[str], batches: int, lines: int) -> list[tuple[int, ...]]:
    """Per batch: (batch, RSS after it, RSS after release_free_memory, oneDNN shapes so far)."""
    model = pyfunc.TranslatorModel()
    model.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}))
    process = psutil.Process()
    rows: list[tuple[int, ...]] = []
    with product_shapes() as shapes:
        for b in range(batches):
            model.translator.translate(sentences[b * lines : (b + 1) * lines])
            after = process.memory_info().rss / 2**20
            pyfunc.release_free_memory()
            rows.append((b + 1, round(after), round(process.memory_info().rss / 2**20), len(shapes)))
    return rows


DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@click.command()
@click.option("--model", "model_dir", type=DIR, required=True)
@click.option("--split-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--batches", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--lines", type=click.IntRange(1, 4096), default=64, show_default=True)
def main(model_dir: Path, split_file: Path, batches: int, lines: int) -> None:
    """Translate batches of new sentences in one process; RSS after each."""
    sentences = read_lines(split_file)
    if len(sentences) < batches * lines:
        raise click.UsageError(
            f"--split-file holds {len(sentences):,} sentences; {batches} batches of {lines} need "
            f"{batches * lines:,}: lower --batches or --lines"
        )
    rows = measure(model_dir, sentences, batches, lines)
    click.echo(markdown_table(HEADER, rows, align="rrrr"))
    capacity = os.environ.get(CACHE, "unset")
    info = ", ".join(f"{k} {v}" for k, v in machine_info("torch threads", torch.get_num_threads()).items())
    click.echo(f"\n{CACHE}: {capacity}. Machine: {info}.")


if __name__ == "__main__":
    main()
