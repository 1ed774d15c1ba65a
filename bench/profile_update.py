"""Where one training update's time goes: torch.profiler on our update step, eager and compiled.

    python -m bench.profile_update                      # bf16, eager and compiled, 5 updates each
    python -m bench.profile_update --precision fp32 --no-compile --top 30

Not a benchmark of speed (bench/train_speed.py is): it runs our UpdateStep (bench.training.ours)
on the synthetic 128 x 16 batch of the default model, warms it up, then profiles --updates
updates and prints the CPU self time by kind of work, per update, and torch.profiler's own
table of the top operators. The kinds:

- matmul: aten::mm, addmm, bmm, matmul (the model FLOPs bench/flops.py counts);
- casts: aten::copy_ and _to_copy outside compiled code (autocast's bf16 copies of weights and
  activations, and the fp32 gradients);
- dropout masks: the random bits and their comparison (pipeline::keep_mask_like);
- compiled kernels: inductor's fused code (elementwise, norms, softmax, the loss), one entry per
  compiled graph;
- optimizer: the fused AdamW and the gradient clipping's norms;
- other: everything else (elementwise ops and reductions in eager mode, autograd bookkeeping).
"""

from __future__ import annotations

import collections
from pathlib import Path

import click
import torch
from torch.profiler import ProfilerActivity, profile

from bench.training import make_setup, ours, synthetic_batch, with_precision
from pipeline import params as P

KINDS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"),
    "casts": ("aten::copy_", "aten::_to_copy"),
    "dropout masks": ("aten::random_", "aten::ge", "pipeline::keep_mask_like"),
    "optimizer": (
        "aten::_fused_adamw_",
        "aten::_foreach_norm",
        "aten::linalg_vector_norm",
        "aten::_foreach_mul_",
    ),
}


def kind_of(name: str) -> str:
    if "CompiledFxGraph" in name:
        return "compiled kernels"
    for kind, names in KINDS.items():
        if name in names:
            return kind
    return "other"


@click.command()
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="bf16", show_default=True)
@click.option(
    "--compile/--no-compile", "with_compiled", default=True, show_default=True, help="Also compiled."
)
@click.option("--updates", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--top", type=click.IntRange(min=0), default=15, show_default=True, help="Operators listed.")
def main(precision: str, with_compiled: bool, updates: int, top: int) -> None:
    """Profile our update step and say where its time goes."""
    params = P.load(Path(__file__).resolve().parents[1] / "params.yaml")
    setup = make_setup(params, smoke=False, seconds=1.0, repeats=1, real_batches=0)
    batch = synthetic_batch(setup.vocab, setup.batch, setup.length, seed=1)
    click.echo(f"{torch.get_num_threads()} torch threads, {setup.batch} x {setup.length} batch, {precision}")
    for compiled in (False, True) if with_compiled else (False,):
        step = ours(with_precision(params, setup.model, precision, compiled), setup.vocab, seed=1)
        for _ in range(5):  # the compiled step builds its kernels in the first
            step(batch)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(updates):
                step(batch)
        events = prof.key_averages()
        by_kind: dict[str, float] = collections.defaultdict(float)
        for e in events:
            by_kind[kind_of(e.key)] += e.self_cpu_time_total / 1000 / updates  # ms per update
        total = sum(by_kind.values())
        click.echo(f"\n{'compiled' if compiled else 'eager'}: {total:.0f} ms of CPU self time per update")
        for kind, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
            click.echo(f"  {kind:<17} {ms:7.1f} ms  {ms / total:6.1%}")
        if top:
            click.echo(events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60))


if __name__ == "__main__":
    main()
