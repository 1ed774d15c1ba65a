"""Where one training update's time goes: torch.profiler on our update step, eager and compiled.

    python -m bench.profile_update                      # bf16, eager and compiled, 5 updates each
    python -m bench.profile_update --precision fp32 --no-compile --top 30

Not a benchmark of speed (bench/train_speed.py is): it runs our UpdateStep (bench.training.ours)
on the synthetic 128 x 16 batch of the default model, warms it up, then profiles --updates
updates and prints the CPU self time by kind of work, per update, and torch.profiler's own
table of the top operators. The kinds:

- matrix products: every operator that multiplies matrices, whatever library runs it (aten's
  mm, addmm, bmm, baddbmm, matmul, linear; oneDNN's _linear_pointwise and its backward; int8
  qlinear), recognized by the verb in its name;
- fused attention: torch's scaled_dot_product kernels (products and softmax in one), where used;
- elementwise and reductions: operators torch tags pointwise or reduction, norms and softmax;
- casts: copy_ and _to_copy outside compiled code (autocast's bf16 copies, fp32 gradients);
- memory and views: allocation, views, gathers and concatenation;
- dropout masks: random bits, and everything run inside pipeline::keep_mask_like;
- optimizer: everything inside the optimizer's step and zero_grad, and the clipping's norms;
- compiled kernels: inductor's fused code, one entry per compiled graph;
- framework: autograd's engine and the Python autograd functions' own frames;
- other: anything not recognized; each such operator over 1% of the update is named.
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path

import click
import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from bench.training import make_setup, ours, synthetic_batch, with_precision
from pipeline import params as P

# Operators are classified by what they compute, not by the names one CPU happens to use
# (aten::addmm on one machine, mkldnn::_linear_pointwise on another, cuBLAS behind aten::mm on a
# GPU): the verb in the name for products, torch's own operator tags (pointwise, reduction,
# random) and schemas (views) for the rest, and the op or range an operator runs inside.
PRODUCT_VERBS = frozenset(
    {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "qlinear", "gemm", "mv", "addmv"}
    | {"dot", "vdot", "einsum", "tensordot", "bilinear"}
)
NORM_VERBS = frozenset({"norm", "softmax", "threshold", "masked", "tril", "triu"})
MEMORY_VERBS = frozenset(
    {"empty", "zeros", "ones", "fill", "zero", "clone", "contiguous", "resize", "cat", "stack"}
    | {"index", "put", "gather", "scatter", "embedding", "split", "pad", "lift", "fresh", "arange"}
    | {"view", "strided", "nonzero", "item", "scalar", "dense"}
)
CASTS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})
CLIPPING = frozenset({"aten::_foreach_norm", "aten::linalg_vector_norm", "aten::_foreach_mul_"})
INSIDE = {"pipeline::keep_mask_like": "dropout masks", "Optimizer.": "optimizer"}
UNNAMED_SHARE = 0.01  # an unrecognized operator above this share of the update is named
KINDS = (
    "matrix products",
    "fused attention",
    "elementwise and reductions",
    "casts",
    "memory and views",
    "dropout masks",
    "optimizer",
    "compiled kernels",
    "framework",
    "other",
)


@functools.cache
def _schema_facts(name: str) -> tuple[set[str], bool] | None:
    """An operator's tags over all its overloads, and whether it returns a view; None if unknown."""
    namespace, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError):
        return None
    tags = {t.name for o in overloads for t in o.tags}
    views = any(
        r.alias_info is not None and not r.alias_info.is_write for o in overloads for r in o._schema.returns
    )
    return tags, views


def kind_of(name: str, inside: tuple[str, ...] = ()) -> str:
    """The kind of work of the operator or range `name`, run inside the ranges `inside`."""
    if "CompiledFxGraph" in name or "Torch-Compiled Region" in name:
        return "compiled kernels"
    for marker, kind in INSIDE.items():
        if any(n.startswith(marker) for n in (name, *inside)):
            return kind
    if name in CLIPPING:
        return "optimizer"
    namespace, _, op = name.rpartition("::")
    if not namespace or "autograd" in namespace:
        return "framework"  # Python autograd functions' frames, autograd's engine
    verbs = set(op.strip("_").split("_"))
    if "attention" in verbs:
        return "fused attention"
    if verbs & PRODUCT_VERBS:
        return "matrix products"
    if name in CASTS:
        return "casts"
    facts = _schema_facts(name)
    if facts is None:
        return "other"
    tags, returns_view = facts
    if "nondeterministic_seeded" in tags:
        return "dropout masks"
    if verbs & NORM_VERBS:
        return "elementwise and reductions"
    if returns_view or verbs & MEMORY_VERBS:  # before tags: torch tags clone pointwise
        return "memory and views"
    if {"pointwise", "reduction"} & tags:
        return "elementwise and reductions"
    return "other"


def _ancestors(event: FunctionEvent) -> tuple[str, ...]:
    names = []
    while event.cpu_parent is not None:
        event = event.cpu_parent
        names.append(event.name)
    return tuple(names)


def split_by_kind(events: list[FunctionEvent]) -> tuple[dict[str, float], dict[str, float]]:
    """-> (self CPU µs by kind, self CPU µs of each operator classified as other)."""
    by_kind: dict[str, float] = collections.defaultdict(float)
    unknown: dict[str, float] = collections.defaultdict(float)
    for e in events:
        kind = kind_of(e.name, _ancestors(e))
        by_kind[kind] += e.self_cpu_time_total
        if kind == "other":
            unknown[e.name] += e.self_cpu_time_total
    return dict(by_kind), dict(unknown)


def summary(by_kind: dict[str, float], unknown: dict[str, float], updates: int) -> list[str]:
    """Lines of ms per update and share by kind, then each unrecognized operator over UNNAMED_SHARE."""
    total = sum(by_kind.values())
    lines = [f"{total / 1000 / updates:.0f} ms of CPU self time per update"]
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {kind:<26} {us / 1000 / updates:7.1f} ms  {us / total:6.1%}")
    for name, us in sorted(unknown.items(), key=lambda kv: -kv[1]):
        if us >= UNNAMED_SHARE * total:
            lines.append(f"    not recognized, counted in other: {name} {us / total:.1%}")
    return lines


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
        click.echo(f"\n{'compiled' if compiled else 'eager'}:")
        click.echo("\n".join(summary(*split_by_kind(prof.events()), updates)))
        if top:
            click.echo(
                prof.key_averages().table(
                    sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60
                )
            )


if __name__ == "__main__":
    main()
