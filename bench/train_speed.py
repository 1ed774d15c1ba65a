"""Training speed: this project's train step against HF Marian and torch.nn.Transformer, on a CPU or a GPU.

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
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import torch

from bench import flops
from bench.common import markers, merge_rows, row, write_section
from bench.options import check_device, device_option, report_files, rows_option, section_option, seed_option
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
from pipeline.model.transformer import build_model
from pipeline.reporting.tables import fmt, fmt_whole, markdown_table

REPO = Path(__file__).resolve().parents[1]
TRAIN_START, TRAIN_END = markers("train")
GPU_START, GPU_END = markers("train", "cuda")  # the GPU check's section
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
        run = with_precision(params, setup.model, precision, setup.compiled, setup.device)
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


MFU = "mfu_of_datasheet_peak"


def utilization(setups: list[Setup], rows: list[dict], precisions: list[str], vocab: int) -> list[dict]:
    """On a GPU with a known peak (bench/flops.py): each system's tokens/s x the update's model FLOPs
    per target token, over the dense datasheet peak at that precision; nothing on a CPU."""
    first = setups[0]
    if first.device != "cuda" or first.model.arch != "encoder_decoder":  # PaLM's formula is for the latter
        return []
    model = build_model(first.model, vocab, vocab)
    lengths = np.full(first.batch, first.length)
    per_token = flops.update_flops(model, lengths, lengths) / (first.batch * first.length)
    name = torch.cuda.get_device_name(0)
    metric = "model_mflop_per_target_token"
    out = [row("-", first.task, p, metric, per_token / 1e6, digits=2) for p in precisions]
    for precision in precisions:
        peak = flops.peak_flops(name, precision)
        out += [
            row(r["system"], r["task"], precision, MFU, r["value"] * per_token / peak, digits=5)
            for r in rows
            if peak and r["precision"] == precision and r["metric"] == "tokens_per_s"
        ]
    return out


# --- reporting ---------------------------------------------------------------------


def train_section(rows: list[dict], setup: Setup, info: dict[str, str], command: str) -> str:
    """The Markdown training section: one table per measurement, ratios against the bar, how it was run."""
    v = {(r["system"], r["task"], r["precision"], r["metric"]): r["value"] for r in rows}
    precisions = sorted({r["precision"] for r in rows if r["task"] == setup.task}, key=["fp32", "bf16"].index)
    cfg = setup.model
    smoke = " — SMOKE RUN, tiny sizes, not a measurement" if setup.smoke else ""
    start, end = markers("train", setup.device)
    out = [start, f"## Training speed ({'GPU' if setup.device == 'cuda' else 'CPU'}){smoke}", ""]
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
    out += utilization_table(v, setup, precisions)
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
    out += ["", end]
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
        verdict = ("ok" if ratio >= BAR else "MISSED") if ratio is not None and setup.device == "cpu" else ""
        cells.append("-" if ratio is None else f"{ratio:.2f}x {verdict}".strip())
    ratios = [["ratio", *cells, f">= {BAR}x" if setup.device == "cpu" else "(the aim is the CPU's)"]]
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


def utilization_table(v: dict, setup: Setup, precisions: list[str]) -> list[str]:
    """On a GPU: each system's model FLOP utilization (eager, and compiled where measured)."""
    per_token = v.get(("-", setup.task, precisions[0], "model_mflop_per_target_token"))
    if per_token is None:
        return []
    cells = lambda system, task: [fmt(v.get((system, task, p, MFU)), 3) for p in precisions]
    rows = [
        [f"{s}, compiled" if mode.compiled else s, *cells(s, mode.task)]
        for mode in (setup, dataclasses.replace(setup, compiled=True))
        for s in SYSTEMS
        if v.get((s, mode.task, precisions[0], MFU)) is not None
    ]
    return [
        f"Model FLOP utilization: target tokens/s x {per_token:,.1f} MFLOP per target token (PaLM's "
        "formula, bench/flops.py) over the GPU's dense datasheet peak at that precision:",
        "",
        markdown_table(["system", *precisions], rows, "l" + "r" * len(precisions)),
        "",
    ]


def write_markdown(path: Path, section: str, device: str = "cpu") -> None:
    """Replace the device's training section of `path` (or append it), keeping everything else."""
    write_section(path, *markers("train", device), section)


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
    device: str = "cpu",
    shape: tuple[int, int] = (128, 16),
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
        setup = make_setup(params, smoke, seconds, repeats, device, shape)
        systems = available_systems()
        say(f"train_speed: systems {', '.join(systems)}; {torch.get_num_threads()} torch threads")
        # Read now, while the thread count is the one measured with.
        info = machine_info("torch threads", torch.get_num_threads(), ["transformers"])
        if device == "cuda":
            info["GPU"] = torch.cuda.get_device_name(0)
        setups = [setup, dataclasses.replace(setup, compiled=True)] if compiled else [setup]
        rows = [r for s in setups for r in throughput(s, params, list(precisions), systems, seed, say)]
        rows += utilization(setups, rows, list(precisions), setup.vocab)
    finally:
        torch.set_num_threads(threads)  # a caller (the smoke test) keeps its own setting
    if smoke:
        rows = [r | {"smoke": True} for r in rows]
    if out_json is not None:
        write_json(out_json, merge_rows(out_json, rows))
    if out_md is not None:
        section = train_section(rows, setup, info, command or "python -m bench.train_speed")
        write_markdown(out_md, section, device)
    return rows


def parse_shape(value: str) -> tuple[int, int]:
    """--shape 128x16 -> (128, 16): sentences, and tokens a row (at least 2: EOS / BOS and one more)."""
    if not re.fullmatch(r"[1-9][0-9]*x([2-9]|[1-9][0-9]+)", value):
        raise click.BadParameter(f"{value!r}: sentences x tokens, as 128x16 (at least 2 tokens)")
    batch, length = value.split("x")
    return int(batch), int(length)


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
@device_option
@click.option(
    "--shape",
    default="128x16",
    show_default=True,
    callback=lambda _ctx, _param, value: parse_shape(value),
    help="The synthetic batch, sentences x tokens (a GPU wants a larger one than a CPU).",
)
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
    device: str,
    shape: tuple[int, int],
    compiled: bool | None,
    seed: int,
) -> None:
    """Measure the training throughput of ours and its peers, eager and compiled."""
    chosen = tuple(p.strip() for p in precisions.split(",") if p.strip())
    if not chosen or set(chosen) - {"fp32", "bf16"}:
        raise click.BadParameter("a comma-separated subset of fp32,bf16", param_hint="--precisions")
    check_device(device)
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
        device=device,
        shape=shape,
        seed=seed,
        command="python -m bench.train_speed " + " ".join(sys.argv[1:]),
        say=lambda m: click.echo(m, err=True),
    )
    for path in (out_json, out_md):
        if path is not None:
            click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    main()
