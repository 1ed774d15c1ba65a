"""Training speed on CPU: this project's train step against HF Marian and torch.nn.Transformer.

    python -m bench.train_speed --bin data/bin --out-json reports/bench.json --out-md reports/bench.md
    python -m bench.train_speed --bin data/bin --bpe data/bpe --clean data/clean ...  # + subword sampling
    python -m bench.train_speed --smoke --out-json /tmp/b.json --out-md /tmp/b.md   # seconds, tiny sizes

Not a test: it measures, in one run,

1. throughput: target tokens/s of whole updates (forward, backward, AdamW
   step; label-smoothed CE 0.1, gradients clipped at 1.0, the inverse-sqrt
   schedule) on one synthetic batch of 128 sentences x 16 tokens (no padding;
   the masks are built and applied all the same), identical tensors for
   - ours: pipeline.training.step.UpdateStep.update itself, on build_model(params.yaml's model),
   - hf-marian: transformers' MarianMTModel from a MarianConfig of the same dimensions,
     random weights, embeddings shared and tied,
   - torch-nn-transformer: torch.nn.Transformer (pre-LN, batch-first) with a tied
     embedding, sinusoidal positions, causal + key-padding masks;
   in fp32 and bf16 autocast. The peers do the same math (loss, AdamW
   settings and decay groups, clipping, schedule) in stock torch code, so a
   faster implementation in pipeline.training.optim or .step counts for ours.
   Each system warms up; then, per precision, --repeats rounds in which the
   systems take turns one update at a time (shuffled every turn) until each
   has run --seconds / --repeats; the median round is reported, and the
   ratio within single rounds (lowest, highest) beside it. With --compile
   (the default outside --smoke) all of it again with every system's forward
   and loss under torch.compile, and each system's model FLOP utilization,
   eager and compiled, against the matmul peak measured once (bench/flops.py).
2. real batches (with --bin): our train step on the first --real-batches
   token-budget batches of the train split (max_tokens from params.yaml,
   shuffled, seed), real target tokens/s and the padding fraction, against
   the fixed synthetic batch for the same number of target tokens, interleaved;
   with --compile, our compiled step on the same batches after a first pass
   that compiles their shapes (timed apart).
3. subword sampling (with --bin, --bpe and --clean): our step on the first --real-batches
   batches of epoch 1 cut from data/bin's segmentation and from a sampled one (train.subword_*
   as params.yaml sets them, else BPE-dropout 0.1 or unigram 0.1 as the model is), interleaved,
   while the sampling process prepares epoch 2 beside them as it does in training, so that its
   cost to the updates shows; and the sampler's own sentences/s (pipeline.data.sampling).
4. data-path memory: peak RSS of a fresh process that loads a synthetic
   binarized corpus of 1M (and 10k) pairs, builds one epoch's batches, and
   collates the first --memory-batches of them (no model), with the size of
   the in-memory index, so "memory does not grow with the corpus beyond its
   index" is checked by numbers.

Output: rows {system, task, precision, metric, value} merged into --out-json
(rows with another key, e.g. bench/decode_speed.py's, are kept), and the
section between TRAIN_START and TRAIN_END of --out-md regenerated (the rest of
the file kept). --smoke runs every part at tiny sizes on one thread, marks
its rows smoke, and writes only where the flags say.

Symbols: B sentences, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import torch

from bench import flops
from bench.common import fmt_times, merge_rows, row, write_section
from bench.options import report_files, rows_option, section_option, seed_option
from bench.training import (
    BUILDERS,
    COMPILED,
    SYSTEMS,
    Setup,
    StepFn,
    available_systems,
    make_setup,
    ours,
    rates_by_round,
    synthetic_batch,
    with_precision,
)
from pipeline import params as P
from pipeline.data.batching import Batch, ParallelData, TokenArray, collate, epoch_batches, token_batches
from pipeline.data.sampling import Prefetcher, Sampling, read_text, sample_epoch
from pipeline.data.shards import ShardWriter, offsets_of
from pipeline.data.vocab import Vocab
from pipeline.files import write_json
from pipeline.machine import machine_info
from pipeline.reporting.tables import fmt, fmt_whole, markdown_table
from pipeline.tokens import N_SPECIAL

REPO = Path(__file__).resolve().parents[1]
TRAIN_START, TRAIN_END = "<!-- train:start -->", "<!-- train:end -->"
BAR = 1.25  # the aim: ours >= 1.25x the faster peer at equal precision
REAL, SAME_TOKENS = "train_real_batches", "train_synthetic_same_tokens"
SAMPLING_OFF, SAMPLING_ON, SAMPLER = "train_sampling_off", "train_sampling_on", "subword_sampler"


def write_corpus(bin_dir: Path, pairs: int, vocab: int, seed: int, scale: int = 1) -> int:
    """A synthetic train split in binarize's format (lengths 5-40 times `scale`, uint16); -> bytes of
    its .idx files."""
    rng = np.random.default_rng(seed)
    bin_dir.mkdir(parents=True, exist_ok=True)
    index_bytes = 0
    for side in ("src", "tgt"):
        lengths = rng.integers(5, 41, size=pairs) * scale
        ids = rng.integers(N_SPECIAL, vocab, size=int(lengths.sum()), dtype=np.uint16).astype("<u2")
        with ShardWriter(bin_dir / f"train.{side}") as out:
            out.write(lengths, ids)
        index_bytes += offsets_of(lengths).nbytes
    return index_bytes


# --- the measurements ----------------------------------------------------------------


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
PEAK = "torch.matmul"  # the system of the measured-peak rows


def utilization(
    setups: list[Setup], rows: list[dict], precisions: list[str], say: Callable[[str], None]
) -> list[dict]:
    """Each system's model FLOP utilization, eager and compiled (one setup each), against the matmul
    peak measured here once at the update's own GEMM shapes, dtype and threads (bench.flops); with
    the peak and the FLOPs per target token, under the first setup's task."""
    first = setups[0]
    if first.model.arch != "encoder_decoder":
        return []
    forward = flops.forward_gemms(first.model, first.vocab, first.batch, first.length, first.length)
    gemms = flops.update_gemms(forward)
    per_token = sum(g.flops for g in gemms) / (first.batch * first.length)
    speeds = {
        (r["system"], r["task"], r["precision"]): r["value"] for r in rows if r["metric"] == "tokens_per_s"
    }
    out = []
    for precision in precisions:
        peak = flops.measured_peak(gemms, PRECISION_DTYPES[precision], 0.005 if first.smoke else 0.05)
        say(f"{precision} matmul peak at the update's shapes: {peak / 1e12:.3f} TFLOP/s")
        out += [
            # to 1 MFLOP/s: a slow CPU's bf16 peak (emulated, under 0.01 TFLOP/s) keeps its digits
            row(PEAK, first.task, precision, "gemm_peak_tflops", peak / 1e12, digits=7),
            row(PEAK, first.task, precision, "model_mflop_per_target_token", per_token / 1e6, digits=2),
        ]
        out += [
            row(system, task, precision, "mfu_of_measured_peak", speed * per_token / peak, digits=3)
            for setup in setups
            for (system, task, p), speed in speeds.items()
            if p == precision and task == setup.task
        ]
    return out


def utilization_table(v: dict, setup: Setup, precisions: list[str]) -> list[str]:
    """MFU per system (eager, and compiled where measured) and precision, the measured peak and the
    FLOPs it is measured with."""
    peak = lambda p, m: v.get((PEAK, setup.task, p, m))
    if peak(precisions[0], "gemm_peak_tflops") is None:
        return []
    per_token = peak(precisions[0], "model_mflop_per_target_token")
    rows = []
    for mode in (setup, dataclasses.replace(setup, compiled=True)):
        rows += [
            [
                f"{s}, compiled" if mode.compiled else s,
                *(fmt(v.get((s, mode.task, p, "mfu_of_measured_peak"))) for p in precisions),
            ]
            for s in SYSTEMS
            if v.get((s, mode.task, precisions[0], "mfu_of_measured_peak")) is not None
        ]
    rows.append([f"{PEAK} peak, TFLOP/s", *(fmt(peak(p, "gemm_peak_tflops"), 3) for p in precisions)])
    return [
        f"Model FLOP utilization: target tokens/s x {per_token:,.1f} MFLOP per target token (the update's "
        "matrix products, forward and backward: bench/flops.py) over the matmul peak measured in this run "
        "at those products' shapes, dtype and threads:",
        "",
        markdown_table(["system", *precisions], rows, "l" + "r" * len(precisions)),
        "",
    ]


def corpus_vocab(bin_dir: Path, default: int) -> int:
    """The model vocabulary the binarized ids need: meta.json's, else `default`."""
    meta = bin_dir / "meta.json"
    if not meta.is_file():
        return default
    sizes = json.loads(meta.read_text(encoding="utf-8"))
    return max(sizes["src_vocab_size"], sizes["tgt_vocab_size"])


def real_batch_speed(
    setup: Setup,
    params: P.Params,
    bin_dir: Path,
    precisions: list[str],
    compiled: bool,
    seed: int,
    say: Callable[[str], None],
) -> list[dict]:
    """Our step on the corpus's own token-budget batches, against the fixed synthetic batch; with
    `compiled`, our compiled step on the same batches too."""
    data = ParallelData.load(bin_dir, "train")
    vocab = corpus_vocab(bin_dir, setup.vocab)
    t = params.train
    ids = token_batches(data.src.lengths, data.tgt.lengths, t.max_tokens, shuffle=True, seed=t.seed, epoch=1)
    ids = ids[: setup.warmup + setup.real_batches]
    began = time.perf_counter()
    batches = [collate(data, b) for b in ids]
    collate_ms = (time.perf_counter() - began) * 1000 / max(len(batches), 1)
    warm, timed = batches[: setup.warmup], batches[setup.warmup :]
    real_tokens = sum(b.n_tgt_tokens for b in timed)
    synthetic = synthetic_batch(vocab, setup.batch, setup.length, seed)
    n_synthetic = max(1, round(real_tokens / synthetic.n_tgt_tokens))  # the same target tokens
    task_same = f"{SAME_TOKENS}_{setup.batch}x{setup.length}"
    rows = []
    for precision in precisions:
        step = ours(with_precision(params, setup.model, precision), vocab, seed)
        for b in warm or [synthetic]:
            step(b)
        compiled_step, compile_s = None, 0.0
        if compiled:  # every timed shape compiled before timing: the cost once, then not again
            compiled_step = ours(with_precision(params, setup.model, precision, compiled=True), vocab, seed)
            compile_s = timed_pass(compiled_step, [*warm, *timed])
        real_s, synth_s, compiled_s = [], [], []
        for _ in range(min(setup.repeats, 2)):  # interleaved, so drift hits both; 2 rounds: a pass is long
            real_s.append(timed_pass(step, timed))
            synth_s.append(timed_pass(step, [synthetic] * n_synthetic))
            if compiled_step is not None:
                compiled_s.append(timed_pass(compiled_step, timed))
        real_rate = real_tokens / statistics.median(real_s)
        synth_rate = n_synthetic * synthetic.n_tgt_tokens / statistics.median(synth_s)
        say(
            f"{precision} real batches: {real_rate:,.0f} tok/s; "
            f"synthetic, same tokens: {synth_rate:,.0f} tok/s"
        )
        padded = sum(b.tgt_out.numel() for b in timed)
        rows += [
            row("ours", REAL, precision, "tokens_per_s", real_rate),
            row("ours", REAL, precision, "padded_tokens_per_s", padded / statistics.median(real_s)),
            row("ours", task_same, precision, "tokens_per_s", synth_rate),
            row("ours", REAL, precision, "ratio_vs_synthetic", real_rate / synth_rate, digits=3),
        ]
        if compiled_s:
            compiled_rate = real_tokens / statistics.median(compiled_s)
            say(
                f"{precision} real batches, compiled: {compiled_rate:,.0f} tok/s "
                f"(first pass, compiling: {compile_s:.0f} s)"
            )
            rows += [
                row("ours", REAL + COMPILED, precision, "tokens_per_s", compiled_rate),
                row(
                    "ours", REAL + COMPILED, precision, "ratio_vs_eager", compiled_rate / real_rate, digits=3
                ),
                row("ours", REAL + COMPILED, precision, "first_pass_s", compile_s, digits=1),
            ]
    padded_src = sum(b.src.numel() for b in timed)
    rows += [
        row("ours", REAL, "-", "batches", len(timed)),
        row("ours", REAL, "-", "target_tokens", real_tokens),
        row("ours", REAL, "-", "mean_batch_sentences", sum(map(len, timed)) / len(timed)),
        row("ours", REAL, "-", "padding_fraction_tgt", 1 - real_tokens / padded, digits=4),
        row(
            "ours",
            REAL,
            "-",
            "padding_fraction_src",
            1 - sum(b.n_src_tokens for b in timed) / padded_src,
            digits=4,
        ),
        row("ours", REAL, "-", "collate_ms_per_batch", collate_ms, digits=3),
    ]
    return rows


def sampling_speed(
    setup: Setup,
    params: P.Params,
    dirs: tuple[Path, Path, Path],
    precisions: list[str],
    seed: int,
    say: Callable[[str], None],
) -> list[dict]:
    """Our step on batches of data/bin's segmentation and of a sampled one; the sampler's speed."""
    bin_dir, bpe_dir, clean_dir = dirs
    data = ParallelData.load(bin_dir, "train")
    text = read_text(clean_dir, len(data))
    vocab = Vocab.load(bpe_dir, threads=1)
    kind = "bpe_dropout" if vocab.model_type == "bpe" else "unigram"
    how = Sampling.of(params.train) or Sampling(kind, 0.1, -1, params.train.seed)
    n = min(len(data), 2000)
    began = time.perf_counter()
    sample_epoch(vocab, (text[0][:n], text[1][:n]), how, 1)
    sentences_per_s = 2 * n / (time.perf_counter() - began)
    prefetcher = Prefetcher(bpe_dir, text, how, first=1)
    try:
        src, tgt = prefetcher.get(1)  # from here on the child samples epoch 2, beside the updates
        sampled = ParallelData(TokenArray.from_arrays(*src), TokenArray.from_arrays(*tgt))
        rows = [row("ours", SAMPLER, "-", "sentences_per_s", sentences_per_s)]
        rows += _on_off_rows(setup, params, (data, sampled), precisions, seed, say)
    finally:
        prefetcher.close()
    return [*rows, row("ours", SAMPLER, "-", f"{how.kind}_alpha", how.alpha, digits=3)]


def _on_off_rows(
    setup: Setup,
    params: P.Params,
    datasets: tuple[ParallelData, ParallelData],
    precisions: list[str],
    seed: int,
    say: Callable[[str], None],
) -> list[dict]:
    """tokens/s of our step on the first batches of each (off: data/bin's, on: sampled), interleaved."""
    t = params.train
    passes = []
    for data in datasets:
        ids = token_batches(
            data.src.lengths, data.tgt.lengths, t.max_tokens, shuffle=True, seed=t.seed, epoch=1
        )
        passes.append([collate(data, b) for b in ids[: setup.warmup + setup.real_batches]])
    vocab = max(max(int(b.src.max()), int(b.tgt_out.max())) for p in passes for b in p) + 1
    rows = []
    for precision in precisions:
        step = ours(with_precision(params, setup.model, precision), vocab, seed)
        for b in passes[0][: setup.warmup]:
            step(b)
        seconds: list[list[float]] = [[], []]
        for _ in range(min(setup.repeats, 2)):
            for k, batches in enumerate(passes):
                seconds[k].append(timed_pass(step, batches[setup.warmup :]))
        for task, batches, s in zip((SAMPLING_OFF, SAMPLING_ON), passes, seconds):
            tokens = sum(b.n_tgt_tokens for b in batches[setup.warmup :])
            rows.append(row("ours", task, precision, "tokens_per_s", tokens / statistics.median(s)))
        say(f"{precision} sampling off / on: {rows[-2]['value']:,.0f} / {rows[-1]['value']:,.0f} tok/s")
    return rows


def sampling_table(v: dict, precisions: list[str]) -> list[str]:
    get = lambda task, p, m: v.get(("ours", task, p, m), float("nan"))
    kind = next((k[3].removesuffix("_alpha") for k in v if k[1] == SAMPLER and k[3].endswith("_alpha")), "?")
    out = [
        f"Subword sampling ({kind}, alpha {get(SAMPLER, '-', f'{kind}_alpha'):g}): our step on the first "
        "real train batches of epoch 1 cut from data/bin's segmentation (off) and from a sampled one "
        "(on), while the sampling process prepares the next epoch beside them; the sampler alone makes "
        f"{get(SAMPLER, '-', 'sentences_per_s'):,.0f} sentences/s on one core. Target tokens/s:",
        "",
    ]
    rows = [
        [p, *(fmt_whole(get(task, p, "tokens_per_s")) for task in (SAMPLING_OFF, SAMPLING_ON))]
        for p in precisions
    ]
    return [*out, markdown_table(["precision", "sampling off", "sampling on"], rows, "lrr"), ""]


def timed_pass(step: StepFn, batches: list[Batch]) -> float:
    """Seconds to run one update per batch."""
    began = time.perf_counter()
    for b in batches:
        step(b)
    return time.perf_counter() - began


# --- memory of the data path -------------------------------------------------------


def proc_status_mb() -> dict[str, float]:
    """This process's VmRSS, VmHWM (peak), RssAnon (heap) and RssFile (mapped pages), in MB."""
    path = Path("/proc/self/status")
    lines = path.read_text().splitlines() if path.is_file() else []
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    keys = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    return {k: float(fields[k].split()[0]) / 1024 for k in keys if k in fields}


def reset_peak() -> bool:
    """Restart the peak-RSS count (VmHWM) from the current RSS; False where Linux does not allow it.

    ru_maxrss cannot be restarted, and a child started by fork + exec starts
    it at its parent's peak: that would hide everything below the parent's size.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def probe_memory(bin_dir: str, max_tokens: int, n_batches: int, seed: int) -> dict[str, float]:
    """Run in a fresh process: peak RSS and peak heap (MB) after each step of the data path.

    RSS counts the corpus pages the collation touched (file-backed, clean: the
    kernel drops them under pressure); the heap peak (tracemalloc, which sees
    numpy's allocations) is what the process itself holds.
    """
    reset = reset_peak()
    peak = (
        (lambda: proc_status_mb()["VmHWM"])
        if reset
        else (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    )  # Linux: KiB
    heap = lambda: tracemalloc.get_traced_memory()[1] / 2**20
    out = {"baseline": proc_status_mb().get("VmRSS", peak()), "peak_reset": float(reset)}
    tracemalloc.start()
    data = ParallelData.load(bin_dir, "train")
    out.update(after_load=peak(), heap_after_load=heap())
    batches = epoch_batches(data, max_tokens, shuffle=True, seed=seed, epoch=1)
    out.update(after_batches=peak(), heap_after_batches=heap())
    for ids in batches[:n_batches]:
        collate(data, ids)  # dropped at once, as the training loop drops each batch after its update
    out.update(peak=peak(), heap_peak=heap())
    tracemalloc.stop()
    end = proc_status_mb()
    out.update(rss_anon_end=end.get("RssAnon", math.nan), rss_file_end=end.get("RssFile", math.nan))
    out["batches"] = min(n_batches, len(batches))
    out["tokens"] = float(data.src.lengths.sum(dtype=np.int64) + data.tgt.lengths.sum(dtype=np.int64))
    return out


def memory_task(pairs: int, scale: int) -> str:
    return f"data_memory_{pairs}" + (f"_x{scale}" if scale != 1 else "")


def memory(setup: Setup, max_tokens: int, seed: int, say: Callable[[str], None]) -> list[dict]:
    """Peak RSS and heap of the data path for each synthetic corpus, each in a fresh subprocess."""
    rows = []
    for pairs, scale in setup.memory_corpora:
        with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
            index_bytes = write_corpus(Path(tmp), pairs, setup.vocab, seed, scale)
            code = (
                "import json, sys; from bench.train_speed import probe_memory; "
                "print(json.dumps(probe_memory(*json.loads(sys.argv[1]))))"
            )
            args = json.dumps([tmp, max_tokens, setup.memory_batches, seed])
            env = dict(os.environ, OMP_NUM_THREADS="1")
            done = subprocess.run(
                [sys.executable, "-c", code, args],
                cwd=REPO,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        task = memory_task(pairs, scale)
        if not probe["peak_reset"]:
            say("warning: cannot reset the peak RSS (/proc/self/clear_refs); peaks include the parent's")
        say(
            f"{pairs:,} pairs, {probe['tokens']:,.0f} tokens: heap peak {probe['heap_peak']:.1f} MB, "
            f"peak RSS {probe['peak']:.0f} MB (after imports {probe['baseline']:.0f} MB), "
            f"index {index_bytes / 2**20:.1f} MB"
        )
        metrics = dict(
            index_mb=index_bytes / 2**20,
            tokens=probe["tokens"],
            baseline_rss_mb=probe["baseline"],
            after_load_rss_mb=probe["after_load"],
            after_batches_rss_mb=probe["after_batches"],
            peak_rss_mb=probe["peak"],
            peak_growth_mb=probe["peak"] - probe["baseline"],
            heap_after_load_mb=probe["heap_after_load"],
            heap_after_batches_mb=probe["heap_after_batches"],
            heap_peak_mb=probe["heap_peak"],
            rss_anon_end_mb=probe["rss_anon_end"],
            rss_file_end_mb=probe["rss_file_end"],
            batches=probe["batches"],
        )
        rows += [
            row("data-path", task, "-", k, val, digits=3 if k == "index_mb" else 1)
            for k, val in metrics.items()
        ]
    return rows


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
    out += utilization_table(v, setup, precisions)
    if any(k[1] == REAL for k in v):
        out += real_table(v, setup, precisions)
    if any(k[1] == SAMPLER for k in v):
        out += sampling_table(v, precisions)
    if any(k[0] == "data-path" for k in v):
        out += memory_table(v, setup)
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


def real_table(v: dict, setup: Setup, precisions: list[str]) -> list[str]:
    same = f"{SAME_TOKENS}_{setup.batch}x{setup.length}"
    get = lambda p, m, task=REAL: v.get(("ours", task, p, m), float("nan"))
    out = [
        f"Ours on the first {get('-', 'batches'):.0f} real train batches (token budget, shuffled; "
        f"{get('-', 'target_tokens'):,.0f} target tokens, "
        f"{get('-', 'mean_batch_sentences'):.1f} sentences a batch, padding "
        f"{get('-', 'padding_fraction_tgt'):.1%} of target and "
        f"{get('-', 'padding_fraction_src'):.1%} of source positions; collate "
        f"{get('-', 'collate_ms_per_batch'):.2f} ms a batch, not timed below) against the fixed "
        f"{setup.batch}x{setup.length} batch for the same number of target tokens:",
        "",
    ]
    header = ["precision", "real tok/s (non-pad)", "real padded tok/s", "synthetic tok/s", "real / synthetic"]
    rows = [
        [
            p,
            fmt_whole(get(p, "tokens_per_s")),
            fmt_whole(get(p, "padded_tokens_per_s")),
            fmt_whole(get(p, "tokens_per_s", same)),
            fmt_times(get(p, "ratio_vs_synthetic")),
        ]
        for p in precisions
    ]
    compiled = REAL + COMPILED
    if not any(k[1] == compiled for k in v):
        return [*out, markdown_table(header, rows, "lrrrr"), ""]
    header += ["compiled tok/s", "compiled / eager", "first compiled pass, s"]
    for p, cells in zip(precisions, rows, strict=True):
        cells += [
            fmt_whole(get(p, "tokens_per_s", compiled)),
            fmt_times(get(p, "ratio_vs_eager", compiled)),
            fmt(get(p, "first_pass_s", compiled), 1),
        ]
    note = (
        "Compiled: the same batches through train.compile, each shape compiled in a first pass "
        "(timed apart: recompiling for new shapes is a cost training pays once)."
    )
    return [*out, markdown_table(header, rows, "lrrrrrrr"), "", note, ""]


def memory_table(v: dict, setup: Setup) -> list[str]:
    get = lambda n, x, m: v.get(("data-path", memory_task(n, x), "-", m), float("nan"))
    out = [
        "Data path only (load the .bin/.idx, one epoch's token batches, collate the first "
        f"{setup.memory_batches}; no model), each in a fresh process. Heap: tracemalloc's peak (Python "
        "and numpy allocations) after each step. RSS: VmHWM, restarted after the imports "
        "(/proc/self/clear_refs); it also counts the memory-mapped corpus pages that collation touched, "
        "which are file-backed and clean (page cache the kernel reclaims at will). MB:",
        "",
    ]
    header = [
        "pairs",
        "tokens (both sides)",
        "index (.idx, both sides)",
        "heap after load",
        "after batching",
        "heap peak",
        "RSS peak - imports",
        "RssAnon at end",
        "RssFile at end",
    ]
    metrics = (
        "index_mb",
        "heap_after_load_mb",
        "heap_after_batches_mb",
        "heap_peak_mb",
        "peak_growth_mb",
        "rss_anon_end_mb",
        "rss_file_end_mb",
    )
    rows = [
        [fmt(n), fmt_whole(get(n, x, "tokens")), *(fmt(get(n, x, m), 1) for m in metrics)]
        for n, x in setup.memory_corpora
    ]
    out += [markdown_table(header, rows, "r" * len(header))]
    large = max(n for n, _ in setup.memory_corpora)
    ratio = get(large, 1, "heap_peak_mb") / get(large, 1, "index_mb")
    longer = max(x for n, x in setup.memory_corpora if n == large)
    tokens, long_tokens = get(large, 1, "tokens"), get(large, longer, "tokens")
    heap, long_heap = get(large, 1, "heap_peak_mb"), get(large, longer, "heap_peak_mb")
    out += [
        "",
        f"The heap holds the index (16 bytes a pair: two int64 offsets), int32 lengths (8 bytes) "
        f"and one epoch's batch order; its peak, in the epoch's sort, is {ratio:.1f}x the index at "
        f"{large:,} pairs. It grows with the number of pairs, as the index does, and not with the "
        f"corpus's tokens: {longer}x longer sentences ({long_tokens:,.0f} tokens instead of "
        f"{tokens:,.0f}) leave the heap peak at {long_heap:.1f} MB against {heap:.1f} MB; the token ids "
        "stay on disk, memory-mapped.",
        "",
    ]
    return out


def write_markdown(path: Path, section: str) -> None:
    """Replace the training section of `path` (or append it), keeping everything else."""
    write_section(path, TRAIN_START, TRAIN_END, section)


# --- the run -----------------------------------------------------------------------


def benchmark(
    *,
    smoke: bool = False,
    params_file: Path = REPO / "params.yaml",
    bin_dir: Path | None = None,
    sampled_from: tuple[Path, Path] | None = None,
    out_json: Path | None = None,
    out_md: Path | None = None,
    seconds: float = 20.0,
    repeats: int = 5,
    real_batches: int = 20,
    precisions: tuple[str, ...] = ("fp32", "bf16"),
    memory_check: bool = True,
    compiled: bool = False,
    seed: int = 1,
    command: str = "",
    say: Callable[[str], None] = print,
) -> list[dict]:
    """Every measurement; merges the rows into out_json and the section into out_md when given; -> rows.

    `sampled_from`: (bpe_dir, clean_dir), with bin_dir, for the subword sampling measurement.
    """
    threads = torch.get_num_threads()
    if smoke:
        torch.set_num_threads(1)  # tiny sizes; and never compete with a real run for the cores
    try:
        rows, setup, info = measure_all(
            smoke,
            params_file,
            bin_dir,
            sampled_from,
            seconds,
            repeats,
            real_batches,
            list(precisions),
            memory_check,
            compiled,
            seed,
            say,
        )
    finally:
        torch.set_num_threads(threads)  # a caller (the smoke test) keeps its own setting
    if out_json is not None:
        write_json(out_json, merge_rows(out_json, rows))
    if out_md is not None:
        write_markdown(out_md, train_section(rows, setup, info, command or "python -m bench.train_speed"))
    return rows


def measure_all(
    smoke: bool,
    params_file: Path,
    bin_dir: Path | None,
    sampled_from: tuple[Path, Path] | None,
    seconds: float,
    repeats: int,
    real_batches: int,
    precisions: list[str],
    memory_check: bool,
    compiled: bool,
    seed: int,
    say: Callable[[str], None],
) -> tuple[list[dict], Setup, dict[str, str]]:
    """The three measurements; -> (rows, the sizes used, machine info as measured)."""
    params = P.load(params_file)
    setup = make_setup(params, smoke, seconds, repeats, real_batches)
    systems = available_systems()
    say(f"train_speed: systems {', '.join(systems)}; {torch.get_num_threads()} torch threads")
    # Read now, while the thread count is the one measured with.
    info = machine_info("torch threads", torch.get_num_threads(), ["transformers"])
    setups = [setup, dataclasses.replace(setup, compiled=True)] if compiled else [setup]
    rows = [r for s in setups for r in throughput(s, params, precisions, systems, seed, say)]
    rows += utilization(setups, rows, precisions, say)
    if bin_dir is not None:
        rows += real_batch_speed(setup, params, bin_dir, precisions, compiled, seed, say)
    if bin_dir is not None and sampled_from is not None:
        rows += sampling_speed(setup, params, (bin_dir, *sampled_from), precisions, seed, say)
    if memory_check:
        rows += memory(setup, params.train.max_tokens, seed, say)
    if smoke:
        rows = [r | {"smoke": True} for r in rows]
    return rows, setup, info


@click.command()
@click.option("--smoke", is_flag=True, help="Tiny sizes, one thread, a few seconds: checks that it runs.")
@click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=REPO / "params.yaml",
    show_default=True,
)
@click.option(
    "--bin",
    "bin_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The binarize stage's output (data/bin): adds the real-batch measurement.",
)
@click.option(
    "--bpe",
    "bpe_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="With --bin and --clean: the subword model(s) (data/bpe), for the subword sampling measurement.",
)
@click.option(
    "--clean",
    "clean_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="With --bin and --bpe: the clean text (data/clean) that subword sampling segments.",
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
@click.option("--real-batches", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--precisions", default="fp32,bf16", show_default=True)
@click.option(
    "--memory/--no-memory",
    "memory_check",
    default=True,
    show_default=True,
    help="Measure the data path's peak RSS on synthetic 1M- and 10k-pair corpora.",
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
    bin_dir: Path | None,
    bpe_dir: Path | None,
    clean_dir: Path | None,
    out_json: Path | None,
    out_md: Path | None,
    seconds: float,
    repeats: int,
    real_batches: int,
    precisions: str,
    memory_check: bool,
    compiled: bool | None,
    seed: int,
) -> None:
    """Measure training throughput of ours and its peers, real-batch speed, and data-path memory."""
    chosen = tuple(p.strip() for p in precisions.split(",") if p.strip())
    if not chosen or set(chosen) - {"fp32", "bf16"}:
        raise click.BadParameter("a comma-separated subset of fp32,bf16", param_hint="--precisions")
    if (bpe_dir is None) != (clean_dir is None) or (bpe_dir is not None and bin_dir is None):
        raise click.UsageError("the subword sampling measurement needs all of --bin, --bpe and --clean")
    out_json, out_md = report_files(smoke, out_json, out_md)
    command = "python -m bench.train_speed " + " ".join(sys.argv[1:])
    benchmark(
        smoke=smoke,
        params_file=params_file,
        bin_dir=bin_dir,
        sampled_from=(bpe_dir, clean_dir) if bpe_dir is not None and clean_dir is not None else None,
        out_json=out_json,
        out_md=out_md,
        seconds=seconds,
        repeats=repeats,
        real_batches=real_batches,
        precisions=chosen,
        memory_check=memory_check,
        compiled=not smoke if compiled is None else compiled,
        seed=seed,
        command=command,
        say=lambda m: click.echo(m, err=True),
    )
    for path in (out_json, out_md):
        if path is not None:
            click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    main()
