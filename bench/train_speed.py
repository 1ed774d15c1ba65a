"""Training speed on CPU: this project's train step against HF Marian and torch.nn.Transformer.

    python -m bench.train_speed --out-json reports/bench.json --out-md reports/bench.md
    python -m bench.train_speed --smoke --out-json /tmp/b.json --out-md /tmp/b.md   # seconds, tiny sizes

Target tokens/s of whole updates (forward, backward, clip 1.0, AdamW, label-smoothed CE 0.1, the
inverse-sqrt schedule) on one synthetic batch, identical for ours (UpdateStep.update on params.yaml's
model), HF MarianMTModel and torch.nn.Transformer (same math in stock torch code), in fp32 and bf16
autocast, eager and (--compile) under torch.compile. The systems take turns one update at a time in
shuffled rounds; the median round is reported with ours / the faster peer and its lowest and highest
single round. Rows {system, task, precision, metric, value} merge into --out-json; the section between
TRAIN_START and TRAIN_END of --out-md is regenerated. bench/README.md says more, and where the model
FLOP utilization, real-batch and data-path memory figures it once measured are kept.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import click
import torch

from bench.common import merge_rows, row, write_section
from bench.options import report_files, rows_option, section_option, seed_option
from bench.training import (
    BUILDERS,
    SYSTEMS,
    Setup,
    available_systems,
    make_setup,
    rates_by_round,
    synthetic_batch,
    with_precision,
)
from pipeline import params as P
from pipeline.files import write_json
from pipeline.machine import machine_info
from pipeline.reporting.tables import fmt_whole, markdown_table

REPO = Path(__file__).resolve().parents[1]
TRAIN_START, TRAIN_END = "<!-- train:start -->", "<!-- train:end -->"
BAR = 1.25  # the aim: ours >= 1.25x the faster peer at equal precision


# --- the measurement -----------------------------------------------------------------


def throughput(
    setup: Setup,
    params: P.Params,
    precisions: list[str],
    systems: list[str],
    seed: int,
    say: Callable[[str], None],
) -> list[dict]:
    """Tokens/s of every system on one synthetic batch, per precision; median over shuffled rounds."""
    batch = synthetic_batch(setup.vocab, setup.batch, setup.length, seed)
    order_rng, rows = random.Random(seed), []
    for precision in precisions:
        run = with_precision(params, setup.model, precision, setup.compiled)
        steps = {name: BUILDERS[name](run, setup.vocab, seed) for name in systems}
        label = f"{precision} compiled" if setup.compiled else precision
        rates = rates_by_round(steps, batch, setup, order_rng, say, label)
        median = {name: statistics.median(r) for name, r in rates.items()}
        rows += [row(name, setup.task, precision, "tokens_per_s", median[name]) for name in systems]
        peers = [median[name] for name in systems if name != "ours"]
        if "ours" in median and peers:
            rows.append(
                row(
                    "ours",
                    setup.task,
                    precision,
                    "ratio_vs_faster_peer",
                    median["ours"] / max(peers),
                    digits=3,
                )
            )
            # The same ratio within each round (ours against that round's faster peer): how far it moves.
            per_round = [
                rates["ours"][i] / max(rates[n][i] for n in systems if n != "ours")
                for i in range(setup.repeats)
            ]
            rows += [
                row("ours", setup.task, precision, "round_ratio_min", min(per_round), digits=3),
                row("ours", setup.task, precision, "round_ratio_max", max(per_round), digits=3),
            ]
    return rows


PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# --- reporting ---------------------------------------------------------------------


def train_section(rows: list[dict], setup: Setup, info: dict[str, str], command: str) -> str:
    """The Markdown training section: one table per measurement, ratios against the bar, how it was run."""
    v = {(r["system"], r["task"], r["precision"], r["metric"]): r["value"] for r in rows}
    precisions = sorted({r["precision"] for r in rows if r["task"] == setup.task}, key=["fp32", "bf16"].index)
    cfg = setup.model
    smoke = " — SMOKE RUN, tiny sizes, not a measurement" if setup.smoke else ""
    out = [TRAIN_START, f"## Training speed (CPU){smoke}", ""]
    out += [
        f"Whole updates (forward, backward, clip 1.0, AdamW, label-smoothed CE 0.1) on one synthetic "
        f"batch of {setup.batch} x {setup.length} target tokens (no padding), the same for every system; "
        f"d_model {cfg.d_model}, {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, FFN {cfg.d_ff}, "
        f"{cfg.n_heads} heads, vocabulary {setup.vocab}, dropout {cfg.dropout}. Median of "
        f"{setup.repeats} round(s) of about {setup.seconds / setup.repeats:g} s of updates per system, "
        f"after {setup.warmup} warm-up update(s); within a round the systems take turns one update at "
        f"a time, in a shuffled order each turn, so a drift in the machine's speed hits all alike. "
        f"Target tokens/s:",
        "",
    ]
    out += throughput_tables(v, setup, precisions)
    compiled = dataclasses.replace(setup, compiled=True)
    if any(k[1] == compiled.task for k in v):
        out += [
            "The same under torch.compile (train.compile: every system's forward and loss compiled "
            "with the default inductor backend; compilation is in the warm-up, not timed):",
            "",
            *throughput_tables(v, compiled, precisions),
        ]
    out += [
        "Notes on equal work: the peers do our update's math in stock torch code (F.cross_entropy "
        "with label smoothing in fp32, torch.optim.AdamW with torch's default implementation, the same "
        "decay groups and schedule, clip_grad_norm_); ours is the update training runs, "
        "pipeline.training.step.UpdateStep, built with no data (bench.training.ours). MarianMTModel "
        "is post-LN (its only layout) and adds a final logits bias; nn.Transformer applies its dropout "
        "inside the FFN as well (ours: activation_dropout 0.0).",
        "",
        "Run with:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    out += [f"- {k}: {val}" for k, val in info.items()]
    out += ["", TRAIN_END]
    return "\n".join(out)


def throughput_tables(v: dict, setup: Setup, precisions: list[str]) -> list[str]:
    """Tokens/s per system and precision; ours over the faster peer against the bar, and per round."""
    right = "l" + "r" * len(precisions)
    systems = [s for s in SYSTEMS if any(k[0] == s and k[1] == setup.task for k in v)]
    speeds = [
        [s, *(fmt_whole(v.get((s, setup.task, p, "tokens_per_s"))) for p in precisions)] for s in systems
    ]
    cells = []
    for p in precisions:
        ratio = v.get(("ours", setup.task, p, "ratio_vs_faster_peer"))
        cells.append("-" if ratio is None else f"{ratio:.2f}x " + ("ok" if ratio >= BAR else "MISSED"))
    ratios = [["ratio", *cells, f">= {BAR}x"]]
    spread = [
        tuple(v.get(("ours", setup.task, p, f"round_ratio_{m}")) for m in ("min", "max")) for p in precisions
    ]
    if all(lo is not None for lo, _ in spread):
        ratios.append(["single rounds, lowest-highest", *(f"{lo:.2f}-{hi:.2f}x" for lo, hi in spread), ""])
    return [
        markdown_table(["system", *precisions], speeds, right),
        "",
        markdown_table(["ours / faster peer", *precisions, "needed"], ratios, right + "l", escape=False),
        "",
    ]


def write_markdown(path: Path, section: str) -> None:
    """Replace the training section of `path` (or append it), keeping everything else."""
    write_section(path, TRAIN_START, TRAIN_END, section)


# --- the run -----------------------------------------------------------------------


def benchmark(
    *,
    smoke: bool = False,
    params_file: Path = REPO / "params.yaml",
    out_json: Path | None = None,
    out_md: Path | None = None,
    seconds: float = 20.0,
    repeats: int = 5,
    precisions: tuple[str, ...] = ("fp32", "bf16"),
    compiled: bool = False,
    seed: int = 1,
    command: str = "",
    say: Callable[[str], None] = print,
) -> list[dict]:
    """Every system at every precision (and compiled); merges the rows into out_json and the section
    into out_md when given; -> rows."""
    threads = torch.get_num_threads()
    if smoke:
        torch.set_num_threads(1)  # tiny sizes; and never compete with a real run for the cores
    try:
        params = P.load(params_file)
        setup = make_setup(params, smoke, seconds, repeats)
        systems = available_systems()
        say(f"train_speed: systems {', '.join(systems)}; {torch.get_num_threads()} torch threads")
        # Read now, while the thread count is the one measured with.
        info = machine_info("torch threads", torch.get_num_threads(), ["transformers"])
        setups = [setup, dataclasses.replace(setup, compiled=True)] if compiled else [setup]
        rows = [r for s in setups for r in throughput(s, params, list(precisions), systems, seed, say)]
    finally:
        torch.set_num_threads(threads)  # a caller (the smoke test) keeps its own setting
    if smoke:
        rows = [r | {"smoke": True} for r in rows]
    if out_json is not None:
        write_json(out_json, merge_rows(out_json, rows))
    if out_md is not None:
        write_markdown(out_md, train_section(rows, setup, info, command or "python -m bench.train_speed"))
    return rows


@click.command()
@click.option("--smoke", is_flag=True, help="Tiny sizes, one thread, a few seconds: checks that it runs.")
@click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=REPO / "params.yaml",
    show_default=True,
)
@rows_option("--out-json")
@section_option("--out-md", "Training section")
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.01),
    default=20.0,
    show_default=True,
    help="Timed seconds per (system, precision), split over the repeats.",
)
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--precisions", default="fp32,bf16", show_default=True)
@click.option(
    "--compile/--no-compile",
    "compiled",
    default=None,
    help="Measure every system under torch.compile as well (train.compile) [default: on, off with --smoke].",
)
@seed_option
def main(
    smoke: bool,
    params_file: Path,
    out_json: Path | None,
    out_md: Path | None,
    seconds: float,
    repeats: int,
    precisions: str,
    compiled: bool | None,
    seed: int,
) -> None:
    """Measure the training throughput of ours and its peers, eager and compiled."""
    chosen = tuple(p.strip() for p in precisions.split(",") if p.strip())
    if not chosen or set(chosen) - {"fp32", "bf16"}:
        raise click.BadParameter("a comma-separated subset of fp32,bf16", param_hint="--precisions")
    out_json, out_md = report_files(smoke, out_json, out_md)
    benchmark(
        smoke=smoke,
        params_file=params_file,
        out_json=out_json,
        out_md=out_md,
        seconds=seconds,
        repeats=repeats,
        precisions=chosen,
        compiled=not smoke if compiled is None else compiled,
        seed=seed,
        command="python -m bench.train_speed " + " ".join(sys.argv[1:]),
        say=lambda m: click.echo(m, err=True),
    )
    for path in (out_json, out_md):
        if path is not None:
            click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    main()
