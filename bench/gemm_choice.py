"""What the float32 GEMM library buys: this project's fp32 training update and decoding with its
linear layers on oneDNN (pipeline/model/linear.py, the default) and on MKL (torch's default, what
PIPELINE_CPU_GEMM=mkl selects), side by side in one run.

    python -m bench.gemm_choice --model data/model --split-file data/clean/test/multi30k-test_2016_flickr.src

Not a test. The two systems are the same code on the same batches and differ
only in the route pipeline.model.linear takes, switched around each call:
- training: bench/train_speed.py's fp32 update of the default model on its
  synthetic 128 x 16 batch (bench/training.py; two trainers built from one seed), the systems
  taking turns one update at a time, median of --repeats rounds;
- decoding: bench/decode_speed.py's greedy and beam-5 passes (bench/decoding.py) of the trained
  model (or random weights without --model), batches of 64, exactly 20 steps,
  interleaved rounds, median; one batch at a time on all threads (one
  worker), the setting pipeline/model/linear.py's size threshold was measured at (docs/cpu-gemm.md).
The peers of those benchmarks (HF Marian, torch.nn.Transformer, HF generate)
run on torch's default, MKL: this shows how much of ours' lead over them is
the GEMM library and how much the rest of the implementation.

Rows {system: ours-onednn | ours-mkl, task, precision fp32, metric, value} are
merged into --out, and the section between GEMM_START and GEMM_END of --md
regenerated. --smoke: tiny sizes, seconds, writes only where told.
"""

from __future__ import annotations

import contextlib
import functools
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import torch

from bench import decoding as D
from bench import training as T
from bench.common import fmt_times, merge_rows, row, write_section
from bench.options import (
    model_option,
    report_files,
    rows_option,
    section_option,
    seed_option,
    split_file_option,
)
from pipeline import params as P
from pipeline.files import write_json
from pipeline.model import linear
from pipeline.reporting.tables import fmt, markdown_table

REPO = Path(__file__).resolve().parents[1]
GEMM_START, GEMM_END = "<!-- gemm:start -->", "<!-- gemm:end -->"
ONEDNN, MKL = "ours-onednn", "ours-mkl"


@contextlib.contextmanager
def mkl_gemms() -> Iterator[None]:
    """pipeline.model.linear's oneDNN route off while inside (PIPELINE_CPU_GEMM=mkl for a process)."""
    saved = linear.use_onednn(False)
    try:
        yield
    finally:
        linear.use_onednn(saved)


def on_mkl(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with mkl_gemms():
            return fn(*args, **kwargs)

    return run


def training(setup: T.Setup, params: P.Params, seed: int, say: Callable[[str], None]) -> list[dict]:
    """fp32 update tokens/s with each GEMM library: median of shuffled turn-taking rounds."""
    run = T.with_precision(params, setup.model, "fp32")
    batch = T.synthetic_batch(setup.vocab, setup.batch, setup.length, seed)
    steps = {ONEDNN: T.ours(run, setup.vocab, seed), MKL: on_mkl(T.ours(run, setup.vocab, seed))}
    rates = T.rates_by_round(steps, batch, setup, random.Random(seed), say, "fp32 train")
    return [row(name, setup.task, "fp32", "tokens_per_s", statistics.median(r)) for name, r in rates.items()]


def decoding(
    setup: D.Setup, model_dir: Path | None, split_file: Path | None, seed: int, say: Callable[[str], None]
) -> list[dict]:
    """Greedy and beam-5 sentences/s of the KV-cached search with each GEMM library."""
    subject = D.smoke_subject(seed) if setup.smoke else D.load_subject(model_dir, seed)
    batches = D.make_batches(D.source_ids(subject, split_file, setup.sentences, seed), setup.batch_size)
    with torch.inference_mode():
        runner = D.torch_runner(subject.model, setup.steps, use_cache=True, workers=1)  # all threads
        systems = {(ONEDNN, "fp32"): lambda: runner, (MKL, "fp32"): lambda: on_mkl(runner)}
        return D.measure(systems, batches, setup.steps, setup.repeats, say, seed)


def section(rows: list[dict], train_task: str, command: str, smoke: bool) -> str:
    """The Markdown section: training tok/s and decoding sentences/s per GEMM library, and their ratio."""
    metric = {train_task: "tokens_per_s", **{task: "sentences_per_s" for task in D.TASKS}}
    value = {(r["system"], r["task"]): r["value"] for r in rows if metric.get(r["task"]) == r["metric"]}
    columns = [
        (train_task, "fp32 training update, target tok/s"),
        ("decode_greedy", "greedy sent/s"),
        ("decode_beam5", "beam 5 sent/s"),
    ]
    title = "## float32 GEMMs: oneDNN against MKL (CPU)"
    title += " — SMOKE RUN, not a measurement" if smoke else ""
    table = [
        [label, *(fmt(value.get((system, t)), 1) for t, _ in columns)]
        for system, label in ((ONEDNN, "ours, oneDNN GEMMs"), (MKL, "ours, MKL GEMMs"))
    ]
    ratio = lambda t: (
        value[ONEDNN, t] / value[MKL, t] if value.get((ONEDNN, t)) and value.get((MKL, t)) else None
    )
    table.append(["oneDNN / MKL", *(fmt_times(ratio(t)) for t, _ in columns)])
    out = [
        GEMM_START,
        title,
        "",
        "This project's own fp32 training update and decoding, with `pipeline/model/linear.py` routing the "
        "linear layers' large products to oneDNN (the default; from 2**23 multiply-adds) and every "
        "product to MKL (torch's default; `PIPELINE_CPU_GEMM=mkl`), interleaved in one run on the same "
        "batches. The peers above run on MKL.",
        "",
        markdown_table(["system", *(c for _, c in columns)], table, "l" + "r" * len(columns)),
        "",
        "Run with:",
        "",
        "```",
        command,
        "```",
        "",
        GEMM_END,
    ]
    return "\n".join(out)


@click.command()
@model_option
@split_file_option
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=40.0,
    show_default=True,
    help="Training time per system, split over the rounds.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Rounds of training and of decoding passes.",
)
@seed_option
@click.option("--smoke", is_flag=True, help="Tiny sizes, one thread: checks that it runs (seconds).")
@rows_option("--out")
@section_option("--md", "Section")
def main(
    model_dir: Path | None,
    split_file: Path | None,
    seconds: float,
    repeats: int,
    seed: int,
    smoke: bool,
    out: Path | None,
    md: Path | None,
) -> None:
    """fp32 training and decoding of this project with oneDNN and with MKL GEMMs, in one run."""
    if not linear.onednn_enabled():
        raise click.UsageError(
            "the oneDNN route is off (PIPELINE_CPU_GEMM=mkl, or no oneDNN in this torch): nothing to compare"
        )
    if smoke:
        torch.set_num_threads(1)
    out, md = report_files(smoke, out, md)
    say = lambda m: click.echo(m, err=True)
    params = P.load(REPO / "params.yaml")
    train_setup = T.make_setup(params, smoke, seconds, repeats, 0)
    decode_setup = D.Setup(8, 4, 4, 1, smoke=True) if smoke else D.Setup(256, 64, 20, repeats)
    rows = training(train_setup, params, seed, say) + decoding(decode_setup, model_dir, split_file, seed, say)
    if smoke:
        rows = [r | {"smoke": True} for r in rows]
    if out is not None:
        write_json(out, merge_rows(out, rows))
    if md is not None:
        command = "python -m bench.gemm_choice " + " ".join(sys.argv[1:])
        write_section(md, GEMM_START, GEMM_END, section(rows, train_setup.task, command, smoke))
    summary = f"wrote {out} and {md}" if out is not None else section(rows, train_setup.task, "", smoke)
    click.echo(summary, err=True)


if __name__ == "__main__":
    main()
