"""Decoding speed: this project's decoder against the uncached one, HF generate and CTranslate2.

    python -m bench.decode_speed --model data/model \\
        --split-file data/clean/test/multi30k-test_2016_flickr.src \\
        --out reports/bench.json --md reports/bench.md

Sentences/s and target tokens/s of greedy search and beam 5, in one run on the same batches, for
our KV-cached search as `translate` runs it (two batches at once on 2+ threads), the same search one
batch at a time and uncached, HF MarianMTModel.generate() at the same dimensions, and CTranslate2
(float32, int8, two inter_threads): exactly --steps (20) steps a sentence for every system, checked;
one warm-up pass, then --repeats shuffled rounds, the median reported. Without --model, a random-
weight model at params.yaml's dimensions. Rows merge into --out; the section between DECODE_START and
DECODE_END of --md is regenerated. bench/README.md gives the rules in full. On a 2-core machine
shared with other work, pass --threads 1.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import click
import torch

from bench.common import markers, merge_rows, write_section
from bench.decoding import (
    TASKS,
    Runner,
    Setup,
    ct2_runner,
    hf_runner,
    load_subject,
    make_batches,
    measure,
    smoke_subject,
    source_ids,
    torch_runner,
)
from bench.options import (
    check_device,
    device_option,
    model_option,
    report_files,
    rows_option,
    section_option,
    seed_option,
    split_file_option,
)
from pipeline.decoding.batches import default_workers
from pipeline.files import write_json
from pipeline.machine import machine_info
from pipeline.reporting.tables import fmt, fmt_whole, markdown_table

REPO = Path(__file__).resolve().parents[1]
DECODE_START, DECODE_END = markers("decode")
GPU_START, GPU_END = markers("decode", "cuda")  # the GPU check's section
SUFFIX = {"cpu": "", "cuda": "_cuda"}  # of a row's task
# Reference numbers we aimed at (sentences/s, batch 64, 20 output tokens, same dimensions).
REFERENCE = {
    ("hf-marian-generate", "fp32"): {"decode_greedy": 173, "decode_beam5": 62},
    ("ctranslate2", "fp32"): {"decode_greedy": 217, "decode_beam5": 93},
    ("ctranslate2", "int8"): {"decode_greedy": 300, "decode_beam5": 128},
    ("pytorch-no-cache", "fp32"): {"decode_greedy": 50},
}
OURS, HF = ("pytorch-kv-cache", "fp32"), ("hf-marian-generate", "fp32")
Key3 = dict[tuple[str, str, str], float]  # (system, precision, task) -> value

# --- reporting ---------------------------------------------------------------------


def decode_section(
    rows: list[dict], info: dict[str, str], command: str, note: str, smoke: bool = False, device: str = "cpu"
) -> str:
    """The Markdown decoding section: sentences/s table, ratios against the bars, how it was run."""

    on = SUFFIX[device]  # a GPU's rows are the CPU's tasks with _cuda: neither table shows the other's

    def by_key(metric: str) -> Key3:
        return {
            (r["system"], r["precision"], r["task"].removesuffix(on)): r["value"]
            for r in rows
            if r["metric"] == metric and r["task"].endswith(on) and r["task"].removesuffix(on) in TASKS
        }

    value, tok = by_key("sentences_per_s"), by_key("tokens_per_s")
    own = set(ROWS.values())  # not the float32 GEMM rows (docs/cpu-gemm.md), which share its tasks
    systems = sorted(
        {(s, p) for s, p, _ in value if (s, p) in own}, key=lambda k: -value.get((*k, "decode_greedy"), 0)
    )
    title = f"## Decoding speed ({'GPU' if device == 'cuda' else 'CPU'})"
    title += " — SMOKE RUN, tiny sizes, not a measurement" if smoke else ""
    start, end = markers("decode", device)
    out = [start, title, "", note, "", speed_table(value, tok, systems, device == "cpu")]
    out += ["", bar_table(value)] if device == "cpu" else []  # the aims and references are the CPU's
    out += ["", "Run with:", "", "```", command, "```", ""]
    out += [f"- {k}: {v}" for k, v in info.items()]
    out += ["", end]
    return "\n".join(out)


def speed_table(value: Key3, tok: Key3, systems: list[tuple[str, str]], references: bool = True) -> str:
    """Sentences/s and tokens/s per (system, precision) and task, beside the (CPU's) reference numbers."""
    header = ["system", "precision", "greedy sent/s", "greedy tok/s", "beam 5 sent/s", "beam 5 tok/s"]
    header += ["reference figures, sent/s (greedy / beam 5)"]
    rows = []
    for s, p in systems:
        ref = REFERENCE.get((s, p), {})
        cells = [x for t in TASKS for x in (fmt(value.get((s, p, t)), 1), fmt_whole(tok.get((s, p, t))))]
        rows.append([s, p, *cells, " / ".join(str(ref.get(t, "-")) for t in TASKS)])
    width = len(header) - (not references)
    return markdown_table(header[:width], [r[:width] for r in rows], "llrrrrl"[:width])


# (label, a system, the one it is compared with, the bar or None, invert: other / system, at most the bar)
BARS: tuple[tuple[str, tuple[str, str], tuple[str, str], float | None, bool], ...] = (
    ("ours / uncached", OURS, ("pytorch-no-cache", "fp32"), 3.0, False),
    ("ours / HF generate", OURS, HF, 1.5, False),
    ("ours, 1 worker / HF generate", ("pytorch-1-worker", "fp32"), HF, None, False),
    ("CT2 fp32 / ours", OURS, ("ctranslate2", "fp32"), 1.5, True),
    ("CT2 fp32, 2 workers / ours", OURS, ("ctranslate2-2-workers", "fp32"), 1.5, True),
    ("CT2 int8 / ours", OURS, ("ctranslate2", "int8"), None, True),
)


def bar_table(value: Key3) -> str:
    """Each ratio of BARS per task, and whether it meets its bar."""
    rows = []
    for label, ours, other, needed, invert in BARS:
        cells = []
        for t in TASKS:
            a, b = value.get((*ours, t)), value.get((*other, t))
            cells.append(bar_cell((b / a if invert else a / b) if a and b else None, needed, invert))
        want = "-" if needed is None else (f"<= {needed}x" if invert else f">= {needed}x")
        rows.append([label, *cells, want])
    return markdown_table(["bar (sentences/s)", "greedy", "beam 5", "needed"], rows, "lrrl", escape=False)


def bar_cell(ratio: float | None, needed: float | None, invert: bool) -> str:
    """1.53x ok or 0.87x MISSED against a bar (at most `needed` with invert, else at least); - for none."""
    if ratio is None:
        return "-"
    if needed is None:
        return f"{ratio:.2f}x"
    met = ratio <= needed if invert else ratio >= needed
    return f"{ratio:.2f}x " + ("ok" if met else "MISSED")


def write_markdown(path: Path, section: str, device: str = "cpu") -> None:
    """Replace the device's decoding section of `path` (or append it), keeping everything else."""
    write_section(path, *markers("decode", device), section)


# --systems name -> its rows' (system, precision)
ROWS = {
    "pytorch-kv-cache": ("pytorch-kv-cache", "fp32"),
    "pytorch-1-worker": ("pytorch-1-worker", "fp32"),
    "pytorch-no-cache": ("pytorch-no-cache", "fp32"),
    "hf-marian-generate": ("hf-marian-generate", "fp32"),
    "ctranslate2-fp32": ("ctranslate2", "fp32"),
    "ctranslate2-2-workers": ("ctranslate2-2-workers", "fp32"),
    "ctranslate2-int8": ("ctranslate2", "int8"),
}
SYSTEMS = tuple(ROWS)


def benchmark(
    setup: Setup,
    *,
    model_dir: Path | None = None,
    split_file: Path | None = None,
    systems: Sequence[str] = SYSTEMS,
    seed: int = 1,
    out: Path | None = None,
    md: Path | None = None,
    command: str = "",
    say: Callable[[str], None] = lambda _: None,
    device: str = "cpu",
) -> list[dict]:
    """Measure `systems` on the same batches; rows merged into `out`, the section into `md` (if given)."""
    threads = torch.get_num_threads()
    subject = smoke_subject(seed) if setup.smoke else load_subject(model_dir, seed)
    batches = make_batches(source_ids(subject, split_file, setup.sentences, seed), setup.batch_size)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        model, steps, d, where = subject.model.to(device), setup.steps, device, Path(tmp)
        factories: dict[str, Callable[[], Runner]] = {
            "pytorch-kv-cache": lambda: torch_runner(model, steps, True, device=d),
            "pytorch-1-worker": lambda: torch_runner(model, steps, True, 1, device=d),
            "pytorch-no-cache": lambda: torch_runner(model, steps, False, device=d),
            "hf-marian-generate": lambda: hf_runner(model, steps, d),
            "ctranslate2-fp32": lambda: ct2_runner(subject, steps, "float32", threads, where, device=d),
            "ctranslate2-2-workers": lambda: ct2_runner(subject, steps, "float32", threads, where, 2, d),
            "ctranslate2-int8": lambda: ct2_runner(subject, steps, "int8", threads, where, device=d),
        }
        chosen = {ROWS[s]: factories[s] for s in systems}
        rows = measure(chosen, batches, setup.steps, setup.repeats, say, seed)
    rows = [r | {"task": r["task"] + SUFFIX[device]} | ({"smoke": True} if setup.smoke else {}) for r in rows]
    info = machine_info("threads (torch, CT2 intra_threads)", threads, ["transformers", "ctranslate2"])
    if device == "cuda":
        info["GPU"] = torch.cuda.get_device_name(0)
    info["load average (1 min) before / after"] = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
    n = sum(map(len, batches))
    note = (
        f"{subject.label}; {n} sentences in batches of {setup.batch_size}, exactly {setup.steps} "
        f"decoding steps each (EOS refused before), median of {setup.repeats} interleaved passes after a "
        f"warm-up; "
        f"sentences/s, tokens/s = {setup.steps} x sentences/s."
    )
    note += (
        f" pytorch-kv-cache runs {default_workers(device)} batches at once (translate's default on "
        f"this machine), the {threads} threads shared among them; pytorch-1-worker one batch at a time "
        "on all threads."
    ) * (device == "cpu")
    note += (
        " Interleaving evens out drifts in the machine's speed within a run, not between runs: on "
        "the 2-core development VM, runs an hour apart moved single cells by 20-30%."
    )
    if out is not None:
        write_json(out, merge_rows(out, rows))
    if md is not None:
        # The table shows this run's rows and, for systems not run now, those already in `out`.
        shown = merge_rows(out, rows) if out is not None else rows
        write_markdown(md, decode_section(shown, info, command, note, setup.smoke, device), device)
    return rows


def available_systems(device: str = "cpu") -> list[str]:
    """The systems whose packages are installed (HF and CT2 are optional extras); on a GPU, not the
    CPU's ways to share threads (one worker is the default there), and CT2 where it sees the GPU."""
    have = {name: importlib.util.find_spec(name) is not None for name in ("transformers", "ctranslate2")}
    if device == "cuda" and have["ctranslate2"]:
        import ctranslate2

        have["ctranslate2"] = ctranslate2.get_cuda_device_count() > 0
    cpu_only = {"pytorch-1-worker", "ctranslate2-2-workers"} if device == "cuda" else set()
    return [
        s
        for s in SYSTEMS
        if not (s.startswith("hf") and not have["transformers"])
        and not (s.startswith("ctranslate2") and not have["ctranslate2"])
        and s not in cpu_only
    ]


@click.command()
@model_option
@split_file_option
@click.option("--sentences", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--steps",
    type=click.IntRange(min=2),
    default=20,
    show_default=True,
    help="Decoding steps (output tokens) per sentence, for every system.",
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Threads for every system; 0: torch's default.",
)
@click.option("--systems", default=None, help="Comma-separated subset.  [default: all installed]")
@device_option
@seed_option
@click.option(
    "--smoke", is_flag=True, help="A tiny model and sizes, one thread: checks that it runs (seconds)."
)
@rows_option("--out")
@section_option("--md", "Decoding section")
def main(
    model_dir: Path | None,
    split_file: Path | None,
    sentences: int,
    batch_size: int,
    steps: int,
    repeats: int,
    threads: int,
    systems: str | None,
    device: str,
    seed: int,
    smoke: bool,
    out: Path | None,
    md: Path | None,
) -> None:
    """Measure decoding speed of every system on the same batches; merge into --out and --md."""
    check_device(device)
    out, md = report_files(smoke, out, md)
    if threads or smoke:
        torch.set_num_threads(1 if smoke else threads)
    chosen = [s.strip() for s in systems.split(",") if s.strip()] if systems else available_systems(device)
    unknown = set(chosen) - set(SYSTEMS)
    if unknown:
        raise click.BadParameter(
            f"unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}", param_hint="--systems"
        )
    setup = Setup(8, 4, 4, 1, smoke=True) if smoke else Setup(sentences, batch_size, steps, repeats)
    command = "python -m bench.decode_speed " + " ".join(sys.argv[1:])
    benchmark(
        setup,
        model_dir=model_dir,
        split_file=split_file,
        systems=chosen,
        seed=seed,
        out=out,
        md=md,
        command=command,
        say=lambda m: click.echo(m, err=True),
        device=device,
    )
    click.echo(f"wrote {out} and {md}" if out else "smoke run: nothing written", err=True)


if __name__ == "__main__":
    main()
