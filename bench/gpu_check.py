"""The GPU check: one command that runs every CUDA path of the pipeline on a lent GPU in minutes.

    bash bench/gpu_check.sh                           # one GPU, at most ~8 minutes: reports/gpu.json,
                                                      # and a section of reports/bench.md
    bash bench/gpu_check.sh --dry-run --out /tmp/gpu  # CPU, tiny sizes, under a minute: the rehearsal

Without a GPU (and without --dry-run) it refuses at once and writes nothing. Sections, in order,
each with a time budget and its elapsed time printed:

1. device: the GPU, its driver, CUDA, cuDNN, NCCL and torch versions.
2. tests: pytest tests/gpu, the CUDA tests (on a CPU all of them skip, with their reason).
3. train: updates (pipeline.training.step.UpdateStep, the train stage's own) of params.yaml's model in bf16,
   fp16 and fp32, and of a base-size model (d_model 512, 6+6 layers, FFN 2048, vocabulary 32k) in
   bf16, eager and under torch.compile: real target tokens/s, model FLOP/s and MFU against the GPU's
   dense peak (bench/flops.py), after warm-up updates over every batch shape timed (so compiling
   happens there). The corpus: --bin, else data/bin if it exists, else a synthetic one with
   Multi30k's lengths (tests/gpu/corpus.py); the JSON says which.
4. torchrun: `torchrun --nproc_per_node 1` of tests/gpu/ddp_probe.py (NCCL; gloo on CPU) and of
   `python -m pipeline train` on a tiny corpus (the stage itself on the GPU).
5. decode: greedy and beam 5, sentences/s, with --model / --test-src, else data/model on
   data/clean/test/<params.yaml's first test set>.src if both exist, else a random-weight default
   model on synthetic sentences.
6. serve: bench/serve_load.py with the same model and sentences (skipped without them): `mlflow
   models serve` on loopback, the model on the GPU, 8 concurrent clients and a bad-load client,
   throughput against offline decoding, p50/p99, errors, RSS growth.

--dry-run runs the same functions on the CPU with tiny sizes: fp16 is recorded as skipped (it needs
CUDA), torch.compile uses dynamo's "eager" backend (capture without code generation), torchrun runs
gloo, and it writes only under --out, never reports/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch
import yaml
from torch._dynamo.utils import counters

from bench.common import TINY, Size, write_section
from bench.flops import peak_flops, update_flops
from pipeline import params as P
from pipeline.data.batching import ParallelData, collate, token_batches
from pipeline.decoding.steps import SearchStats
from pipeline.decoding.translator import Translator
from pipeline.files import write_json
from pipeline.model.transformer import build_model, count_parameters
from pipeline.reporting.tables import fmt, fmt_whole, markdown_table
from pipeline.stages.bpe import auto_vocab_size
from tests.gpu import corpus as synthetic
from tests.gpu.step import Update

REPO = Path(__file__).resolve().parents[1]
FORMAT = "nmt-pipeline/gpu-check/1"
GPU_START, GPU_END = "<!-- gpu:start -->", "<!-- gpu:end -->"
LIMIT_S = 480.0  # the whole check within 8 minutes on one GPU
COMPILE_MIN_S = 90.0  # a compiled run starts only with this much of the train budget left
COMPILE_RTOL = 2e-2  # compiled vs eager first loss, bf16 (tests/gpu checks fp32 to 1e-3)
BASE, TINY_BASE = Size(512, 8, 2048, 6), Size(48, 2, 96, 2)  # the base-size model, and its dry run's
PRECISIONS: tuple[P.Precision, ...] = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class TrainConfig:
    """One timed training run: a model, its vocabulary, a precision, eager or compiled."""

    name: str  # "default" (params.yaml's model) or "base"
    model: P.ModelParams
    vocab: int
    precision: P.Precision
    compile: bool
    max_tokens: int  # per update
    warmup: int  # untimed updates, one per distinct batch (every shape compiles here)
    updates: int  # timed, cycling over the warm-up's batches


@dataclass(frozen=True)
class Sizes:
    """What the real run and the dry run differ in: numbers, the compile backend, budgets."""

    train: tuple[TrainConfig, ...]
    corpus_vocab: int
    corpus_pairs: dict[str, int]
    decode_model: P.ModelParams
    decode_vocab: int
    decode_sentences: int
    torchrun_steps: int
    compile_backend: str
    budgets: dict[str, float]  # seconds per section
    limit_s: float


def make_sizes(params: P.Params, dry_run: bool) -> Sizes:
    default = TINY.of(params.model) if dry_run else params.model
    base = (TINY_BASE if dry_run else BASE).of(params.model)
    pairs = {"train": 300, "val": 20, "test": 20} if dry_run else {"train": 20000, "val": 1000, "test": 1000}
    if dry_run:
        vocab, base_vocab = 300, 500
    else:  # bpe.vocab_size auto: as the bpe stage would size it for the synthetic corpus's pairs
        size = params.bpe.vocab_size
        vocab, base_vocab = auto_vocab_size(pairs["train"]) if size == "auto" else size, 32000
    tokens, base_tokens = (128, 256) if dry_run else (params.train.max_tokens, 8192)
    warm, n, base_warm, base_n = (2, 3, 1, 2) if dry_run else (10, 100, 4, 40)
    runs = [TrainConfig("default", default, vocab, p, False, tokens, warm, n) for p in PRECISIONS]
    runs += [
        TrainConfig("base", base, base_vocab, "bf16", c, base_tokens, base_warm, base_n)
        for c in (False, True)
    ]
    if dry_run:
        budgets = {"tests": 40.0, "train": 40.0, "torchrun": 40.0, "decode": 20.0, "serve": 60.0}
    else:
        budgets = {"tests": 170.0, "train": 170.0, "torchrun": 60.0, "decode": 50.0, "serve": 120.0}
    return Sizes(
        train=tuple(runs),
        corpus_vocab=vocab,
        corpus_pairs=pairs,
        decode_model=default,
        decode_vocab=vocab,
        decode_sentences=8 if dry_run else 1000,  # Multi30k's test_2016_flickr has 1,000
        torchrun_steps=2 if dry_run else 20,
        compile_backend="eager" if dry_run else "inductor",
        budgets=budgets,
        limit_s=120.0 if dry_run else LIMIT_S,
    )


@dataclass
class Check:
    """One run of the check: its settings, scratch folder and clock."""

    params: P.Params
    sizes: Sizes
    device: torch.device
    dry_run: bool
    tmp: Path
    bin_dir: Path | None = None
    model_dir: Path | None = None
    test_src: Path | None = None
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.sizes.limit_s - self.elapsed()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def say(message: str) -> None:
    print(f"[gpu_check] {message}", flush=True)


# --- 1. the device ------------------------------------------------------------------------


def nvidia_smi(query: str) -> str | None:
    """One nvidia-smi --query-gpu field of GPU 0, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else None


def device_section(check: Check) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    if check.device.type != "cuda":
        return info | {"name": f"CPU ({platform.processor() or platform.machine()})", "driver": None}
    props = torch.cuda.get_device_properties(check.device)
    info |= {
        "name": torch.cuda.get_device_name(check.device),
        "driver": nvidia_smi("driver_version"),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(check.device))),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "multiprocessors": props.multi_processor_count,
        "cudnn": torch.backends.cudnn.version(),
        "nccl": ".".join(map(str, v)) if isinstance(v := torch.cuda.nccl.version(), tuple) else str(v),
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    say(f"GPU: {info['name']}, driver {info['driver']}, CUDA {info['cuda_runtime']}, torch {info['torch']}")
    return info


# --- 2. the CUDA tests ------------------------------------------------------------------------


def tests_section(check: Check, budget: float) -> dict[str, Any]:
    """pytest tests/gpu in a subprocess: per test its outcome, reason and recorded properties."""
    xml = check.tmp / "junit.xml"
    command = [sys.executable, "-m", "pytest", "tests/gpu", "-v", "-p", "no:cacheprovider"]
    command += [f"--junitxml={xml}", "-o", "junit_family=xunit1"]  # xunit1 keeps record_property's values
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        cases = verbose_cases(output)  # no junit XML from a killed run: what -v printed so far
        return {
            "status": "failed",
            "error": f"timed out after {budget:.0f} s, {len(cases)} test(s) done",
            "counts": outcome_counts(cases),
            "cases": cases,
            "output_tail": output[-3000:],
        }
    cases = junit_cases(xml) if xml.is_file() else []
    counts = outcome_counts(cases)
    status = "ran" if done.returncode in (0, 5) and not counts["failed"] + counts["error"] else "failed"
    for case in cases:
        if case["outcome"] in ("failed", "error"):
            say(f"  {case['outcome']}: {case['name']}: {case['message'][:200]}")
    say(f"  tests: {counts}")
    return {
        "status": status,
        "returncode": done.returncode,
        "counts": counts,
        "cases": cases,
        "output_tail": done.stdout[-3000:] if status != "ran" else "",
    }


def outcome_counts(cases: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}


def verbose_cases(output: str) -> list[dict[str, Any]]:
    """The outcome lines of `pytest -v` output: `path::test[params] PASSED ...`."""
    found = re.findall(r"^tests/gpu/(\S+)\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", output, re.MULTILINE)
    return [
        {
            "name": f"tests.gpu.{module}::{test}",
            "outcome": {"PASSED": "passed", "FAILED": "failed"}.get(outcome, outcome.lower()),
            "message": "",
            "seconds": None,
            "properties": {},
        }
        for module, test, outcome in found
    ]


def junit_cases(path: Path) -> list[dict[str, Any]]:
    """Each <testcase> of a junit XML: name, outcome, the reason or error's first lines, properties."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (node.get("message") or node.text or "").strip()[:1000]
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases.append(
            {
                "name": f"{case.get('classname')}::{case.get('name')}",
                "outcome": outcome,
                "message": message,
                "seconds": float(case.get("time") or 0.0),
                "properties": properties,
            }
        )
    return cases


# --- 3. training throughput ------------------------------------------------------------------


def corpus_for(check: Check) -> tuple[Path, str]:
    """The binarized corpus to train on, and what it is."""
    if check.bin_dir is not None:
        return check.bin_dir, f"{check.bin_dir} (--bin)"
    default = REPO / "data" / "bin"
    if not check.dry_run and (default / "train.src.idx").is_file():
        return default, "data/bin (the pipeline's binarized corpus)"
    bin_dir = check.tmp / "bin"
    synthetic.write_binarized(bin_dir, check.sizes.corpus_vocab, check.sizes.corpus_pairs)
    pairs = check.sizes.corpus_pairs["train"]
    return (
        bin_dir,
        f"synthetic: {pairs:,} random-id pairs, vocabulary {check.sizes.corpus_vocab}, Multi30k-like lengths",
    )


def train_section(check: Check, budget: float) -> dict[str, Any]:
    bin_dir, source = corpus_for(check)
    data = ParallelData.load(bin_dir, "train")
    top = max(int(ids.max(initial=0)) for array in (data.src, data.tgt) for ids, _ in array.shards) + 1
    say(f"  corpus: {source}")
    deadline = time.monotonic() + budget
    runs = []
    for config in check.sizes.train:
        config = dataclasses.replace(config, vocab=max(config.vocab, top))
        if config.precision == "fp16" and check.device.type != "cuda":
            runs.append(
                skipped(config, "fp16 needs CUDA: its GradScaler is CUDA-only and train refuses it on CPU")
            )
        elif time.monotonic() > deadline - (COMPILE_MIN_S if config.compile and not check.dry_run else 0):
            runs.append(skipped(config, f"too little of the section's budget of {budget:.0f} s was left"))
        else:
            runs.append(train_run(check, config, data))
            say("  " + describe_run(runs[-1]))
    return {"status": "ran", "corpus": source, "runs": runs}


def skipped(config: TrainConfig, reason: str) -> dict[str, Any]:
    say(f"  {config.name} {config.precision}{' compile' if config.compile else ''}: skipped ({reason})")
    return run_header(config) | {"status": "skipped", "reason": reason}


def run_header(config: TrainConfig) -> dict[str, Any]:
    m = config.model
    return {
        "name": config.name,
        "precision": config.precision,
        "compile": config.compile,
        "model": {
            "d_model": m.d_model,
            "layers": f"{m.n_encoder_layers}+{m.n_decoder_layers}",
            "d_ff": m.d_ff,
            "heads": m.n_heads,
            "vocab": config.vocab,
        },
        "max_tokens": config.max_tokens,
        "warmup": config.warmup,
        "updates": config.updates,
    }


def train_run(check: Check, config: TrainConfig, data: ParallelData) -> dict[str, Any]:
    """Warm-up over `warmup` distinct batches, then `updates` timed ones cycling over them."""
    torch.manual_seed(check.params.train.seed)
    model = build_model(config.model, config.vocab, config.vocab).to(check.device)
    backend = check.sizes.compile_backend if config.compile else None
    if config.compile:
        torch._dynamo.reset()
        counters.clear()
        torch._logging.set_logs(dynamo=logging.ERROR)  # graph breaks are counted below, not printed
    # The LR warms up over the warm-up updates (params.yaml's 800 would keep it near 0 here): the
    # schedule changes no cost of an update, and a falling loss shows the updates work.
    train = dataclasses.replace(check.params.train, warmup_steps=config.warmup)
    update = Update.build(model, dataclasses.replace(check.params, train=train), config.precision, backend)
    lengths = data.src.lengths, data.tgt.lengths
    ids = token_batches(*lengths, config.max_tokens, shuffle=True, seed=1, epoch=1)[: config.warmup]
    batches = [collate(data, i) for i in ids]
    flops = [update_flops(model, data.src.lengths[i] + 1, data.tgt.lengths[i] + 1) for i in ids]
    if check.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(check.device)
    check.sync()
    began = time.perf_counter()
    losses = [update(b) for b in batches]
    check.sync()
    warmup_s = time.perf_counter() - began
    order = [i % len(batches) for i in range(config.updates)]
    began = time.perf_counter()
    losses += [update(batches[i]) for i in order]
    check.sync()
    seconds = time.perf_counter() - began
    tokens = sum(batches[i].n_tgt_tokens for i in order)
    achieved = sum(flops[i] for i in order) / seconds
    peak = None
    if check.device.type == "cuda":
        name = torch.cuda.get_device_name(check.device)
        peak = peak_flops(name, config.precision, tf32=torch.backends.cuda.matmul.allow_tf32)
    result = run_header(config) | {
        "status": "ran",
        "parameters": count_parameters(model),
        "distinct_batches": len(batches),
        "warmup_seconds": round(warmup_s, 3),
        "seconds": round(seconds, 3),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "model_tflops_per_s": round(achieved / 1e12, 4),
        "peak_tflops": None if peak is None else peak / 1e12,
        "mfu": None if peak is None else round(achieved / peak, 4),
        "flops_per_target_token": round(sum(flops) / sum(b.n_tgt_tokens for b in batches)),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "finite": all(math.isfinite(x) for x in losses),
        "loss_scale": update.scaler.get_scale() if config.precision == "fp16" else None,
        "compiled": compile_stats() if config.compile else None,
        "max_memory_gib": (
            round(torch.cuda.max_memory_allocated(check.device) / 2**30, 2)
            if check.device.type == "cuda"
            else None
        ),
    }
    del update, model
    if check.device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def compile_stats() -> dict[str, Any]:
    """What dynamo did: graph breaks (by reason, the most frequent first) and graphs compiled."""
    breaks = sorted(counters["graph_break"].items(), key=lambda kv: -kv[1])
    return {
        "graph_breaks": sum(n for _, n in breaks),
        "graph_break_reasons": {reason[:200]: n for reason, n in breaks[:5]},
        "unique_graphs": counters["stats"]["unique_graphs"],
        "frames": dict(counters["frames"]),
    }


def describe_run(r: dict[str, Any]) -> str:
    mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    return (
        f"{r['name']} {r['precision']}{' compile' if r['compile'] else ''}: "
        f"{r['target_tokens_per_s']:,.0f} tgt tok/s, {r['model_tflops_per_s']:.2f} TFLOP/s, MFU {mfu}, "
        f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f} (warm-up {r['warmup_seconds']:.1f} s)"
    )


# --- 4. torchrun ------------------------------------------------------------------------------


def torchrun_command() -> list[str]:
    """torchrun as the environment has it: the script beside this python, else its module."""
    script = Path(sys.executable).parent / "torchrun"
    launcher = [str(script)] if script.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--standalone", "--nproc_per_node", "1"]


def run_logged(command: list[str], log: Path, timeout: float, env: dict[str, str]) -> int:
    """Run with output to `log` (a file nobody must drain); -> the exit code, 124 on timeout."""
    with open(log, "w") as out:
        try:
            return subprocess.run(
                command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            return 124


def torchrun_section(check: Check, budget: float) -> dict[str, Any]:
    deadline = time.monotonic() + budget
    env = dict(os.environ, OMP_NUM_THREADS="1" if check.dry_run else os.environ.get("OMP_NUM_THREADS", "4"))
    cuda = check.device.type == "cuda"
    probe_json, probe_log = check.tmp / "ddp_probe.json", check.tmp / "ddp_probe.log"
    probe = [*torchrun_command(), "-m", "tests.gpu.ddp_probe", "--backend", "nccl" if cuda else "gloo"]
    probe += ["--steps", str(check.sizes.torchrun_steps), "--out", str(probe_json)]
    probe += ["--tiny"] if check.dry_run else []
    code = run_logged(probe, probe_log, deadline - time.monotonic(), env)
    ddp = json.loads(probe_json.read_text()) if code == 0 and probe_json.is_file() else {}
    ddp |= {"returncode": code, "log_tail": "" if code == 0 else probe_log.read_text()[-2000:]}
    say(f"  ddp probe ({'nccl' if cuda else 'gloo'}): exit {code}, {ddp.get('losses')}")

    train = pipeline_train(check, deadline - time.monotonic(), env)
    say(f"  torchrun -m pipeline train: exit {train['returncode']}, {train.get('summary')}")
    ok = code == 0 and ddp.get("finite") and ddp.get("all_reduce_ok") and train["returncode"] == 0
    return {"status": "ran" if ok else "failed", "ddp_probe": ddp, "pipeline_train": train}


def pipeline_train(check: Check, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """`torchrun --nproc_per_node 1 -m pipeline train` for a few updates on a tiny corpus."""
    root = check.tmp / "pipeline-train"
    bin_dir, bpe_dir = synthetic.write_small_run(root)
    model = TINY.of(check.params.model) if check.dry_run else check.params.model
    raw = dataclasses.replace(check.params, model=model).to_dict()
    raw["bpe"]["vocab_size"] = 64
    raw["train"].update(
        device="cuda" if check.device.type == "cuda" else "cpu",
        precision="bf16",
        compile=False,  # a probe of torchrun and DDP for a few updates; the train section times compile
        max_tokens=256 if check.dry_run else 2048,
        max_steps=check.sizes.torchrun_steps,
        max_epochs=100,
        validate_every=0,
        val_bleu=True,  # the end's validation decodes greedily on the device
        early_stop_metric="loss",
        patience=0,
        keep_last=1,
        average_last=0,
        log_every=max(check.sizes.torchrun_steps // 2, 1),
        threads=1 if check.dry_run else 0,
    )
    P.from_dict(raw)  # refuse a typo here, not in the subprocess
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = {"out": root / "model", "checkpoints": root / "checkpoints", "log": root / "log"}
    # "--" ends torchrun's own options: without it, its argparse takes train's --log for a prefix of
    # its --log-dir and stops ("ambiguous option"), as the command in pipeline/stages/train.py does.
    command = [*torchrun_command(), "-m", "pipeline", "--", "train", "--params", str(params_file)]
    command += ["--bin", str(bin_dir), "--bpe", str(bpe_dir), "--no-tracking"]
    command += [x for k, v in out.items() for x in (f"--{k}", str(v))]
    log = check.tmp / "pipeline_train.log"
    code = run_logged(command, log, timeout, env)
    summary_file = out["log"] / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    keys = ("steps", "device", "precision", "world_size", "tokens_per_s", "best_val_loss")
    return {
        "returncode": code,
        "summary": None if summary is None else {k: summary.get(k) for k in keys},
        "log_tail": "" if code == 0 else log.read_text()[-2000:],
    }


# --- 5. decoding ------------------------------------------------------------------------------


def default_test_source() -> Path:
    """The clean stage's source side of params.yaml's first test set."""
    first = P.load(REPO / "params.yaml").data.test[0]
    return REPO / "data" / "clean" / "test" / f"{first}.src"


def decode_source(check: Check) -> tuple[Callable[[int, SearchStats], Any], int, str, int]:
    """(run(beam, stats) decoding every sentence, their count, what they are, the workers used)."""
    model_dir, test_src = check.model_dir, check.test_src
    if model_dir is None and test_src is None and not check.dry_run:
        model_dir, test_src = REPO / "data" / "model", default_test_source()
    if (
        model_dir is not None
        and test_src is not None
        and (model_dir / "model.pt").is_file()
        and test_src.is_file()
    ):
        translator = Translator.from_dir(model_dir, check.device.type)
        lines = test_src.read_text(encoding="utf-8").splitlines()
        run = lambda beam, stats: translator.translate(lines, beam=beam, stats=stats)
        return run, len(lines), f"{model_dir} on {test_src}", translator.workers
    torch.manual_seed(check.params.train.seed)
    vocab = check.sizes.decode_vocab
    model = build_model(check.sizes.decode_model, vocab, vocab)
    # The search reads no vocabulary: source ids in, ids out.
    translator = Translator(model, None, check.params, check.params.decode, check.device)  # type: ignore[arg-type]
    rng = np.random.default_rng(2)
    lengths, _ = synthetic.multi30k_lengths(rng, check.sizes.decode_sentences)
    seqs = [rng.integers(5, vocab, n).tolist() for n in lengths]

    def search(beam: int, stats: SearchStats) -> Any:
        settings = dataclasses.replace(check.params.decode, beam=beam, n_best=1)
        return translator.search_ids(seqs, settings, stats)

    what = (
        f"synthetic: {len(seqs)} random-id sentences (Multi30k-like lengths), a random-weight default "
        f"model, vocabulary {vocab}"
    )
    return search, len(seqs), what, translator.workers


def decode_section(check: Check, budget: float) -> dict[str, Any]:
    run, n, source, workers = decode_source(check)
    say(f"  decoding: {source}")
    run(1, SearchStats())  # warm-up: kernels, cuBLAS handles, the caches' first allocations
    runs = []
    for beam in (1, 5):
        stats = SearchStats()
        check.sync()
        began = time.perf_counter()
        run(beam, stats)
        check.sync()
        seconds = time.perf_counter() - began
        runs.append(
            {
                "beam": beam,
                "sentences": n,
                "seconds": round(seconds, 3),
                "sentences_per_s": round(n / seconds, 1),
                "output_tokens_per_s": round(stats.out_tokens / seconds, 1),
                "batches": stats.batches,
            }
        )
        say(f"  beam {beam}: {n / seconds:,.1f} sentences/s ({stats.out_tokens / seconds:,.0f} tokens/s)")
    return {"status": "ran", "source": source, "device": str(check.device), "workers": workers, "runs": runs}


def serve_section(check: Check, budget: float) -> dict[str, Any]:
    """bench/serve_load.py on the device: `mlflow models serve` of the trained model (on the GPU when
    there is one), 8 concurrent clients and a bad-load client, against offline decoding."""
    from bench import serving

    model_dir, test_src = check.model_dir, check.test_src
    if model_dir is None and test_src is None and not check.dry_run:
        model_dir, test_src = REPO / "data" / "model", default_test_source()
    if (
        model_dir is None
        or test_src is None
        or not (model_dir / "model.pt").is_file()
        or not test_src.is_file()
    ):
        return {
            "status": "skipped",
            "reason": "no trained model and test source (data/model, or --model and --test-src)",
        }
    sentences = [s for s in test_src.read_text(encoding="utf-8").splitlines() if s.strip()]
    clients, requests, lines = (2, 2, 2) if check.dry_run else (8, 8, 8)
    # the server's start and the offline pass come first
    shape = serving.Shape(clients, requests, lines, bad=True, time_limit=max(budget - 40.0, 10.0))
    rows, detail = serving.run_load(model_dir, sentences, "torch", shape, say=say)
    values = {r["metric"]: r["value"] for r in rows}
    say("  serve: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return {"status": "ran", "source": f"{model_dir} on {test_src}", "metrics": values, "detail": detail}


# --- running the sections, and the report -------------------------------------------------------

SECTIONS: dict[str, Callable[[Check, float], dict[str, Any]]] = {
    "tests": tests_section,
    "train": train_section,
    "torchrun": torchrun_section,
    "decode": decode_section,
    "serve": serve_section,
}


def run_section(check: Check, name: str) -> dict[str, Any]:
    """One section within its budget (and the time left): its result, status and seconds."""
    budget = min(check.sizes.budgets[name], check.left())
    began = time.monotonic()
    say(f"{name}: starting (budget {budget:.0f} s, {check.elapsed():.0f} s elapsed)")
    result: dict[str, Any]
    if budget < 5:
        result = {
            "status": "skipped",
            "reason": f"less than 5 s of the {check.sizes.limit_s:.0f} s limit left",
        }
    else:
        try:
            result = SECTIONS[name](check, budget)
        except Exception as e:  # noqa: BLE001 - recorded with its traceback; the other sections still run
            result = {
                "status": "failed",
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-3000:],
            }
    result["seconds"] = round(time.monotonic() - began, 1)
    say(f"{name}: {result['status']} in {result['seconds']:.1f} s ({check.elapsed():.0f} s elapsed)")
    return result


def problems(report: dict[str, Any]) -> list[str]:
    """What failed: sections, tests, training runs with a non-finite loss."""
    found = [
        f"section {n}: {s.get('error') or s['status']}"
        for n, s in report["sections"].items()
        if s["status"] == "failed"
    ]
    for case in report["sections"].get("tests", {}).get("cases", []):
        if case["outcome"] in ("failed", "error"):
            found.append(f"test {case['name']}: {case['outcome']}")
    runs = report["sections"].get("train", {}).get("runs", [])
    for r in runs:
        if r["status"] == "ran" and not r["finite"]:
            found.append(f"train {r['name']} {r['precision']}: a non-finite loss")
    # Compiled and eager runs start from the same weights on the same first batch.
    first = {(r["name"], r["precision"], r["compile"]): r["loss_first"] for r in runs if r["status"] == "ran"}
    for (name, precision, compiled), loss in first.items():
        eager = first.get((name, precision, False))
        if compiled and eager is not None and abs(loss - eager) > COMPILE_RTOL * abs(eager):
            found.append(f"train {name} {precision}: compiled first loss {loss:.4f}, eager {eager:.4f}")
    return found


def markdown(report: dict[str, Any]) -> str:
    """The bench.md section: device, tests, training, torchrun, decoding, problems."""
    d, s = report["device"], report["sections"]
    dry = " — DRY RUN on CPU, tiny sizes, not a measurement" if report["dry_run"] else ""
    out = [GPU_START, f"## GPU check{dry}", ""]
    out += [
        f"{d.get('name')}, driver {d.get('driver')}, CUDA {d.get('cuda_runtime')}, torch {d.get('torch')}; "
        f"{report['date']}; {report['total_seconds']:.0f} s in all (`{report['command']}`).",
        "",
    ]
    out += tests_lines(s.get("tests", {})) + train_lines(s.get("train", {}))
    out += torchrun_lines(s.get("torchrun", {})) + decode_lines(s.get("decode", {}))
    out += serve_lines(s.get("serve", {}))
    failed = [f"- {p}" for p in report["problems"]] or ["- none"]
    return "\n".join([*out, "Problems:", "", *failed, "", GPU_END])


def tests_lines(tests: dict[str, Any]) -> list[str]:
    if not tests.get("counts"):
        return []
    counts = ", ".join(f"{v} {k}" for k, v in tests["counts"].items() if v)
    out = [f"**CUDA tests** (tests/gpu): {counts or 'none collected'}.", ""]
    bad = [c for c in tests["cases"] if c["outcome"] in ("failed", "error")]
    out += [f"- {c['outcome']}: `{c['name']}`: {c['message'][:160]}" for c in bad]
    return out + ([""] if bad else [])


def train_lines(train: dict[str, Any]) -> list[str]:
    if not train.get("runs"):
        return []
    out = [
        f"**Training** on {train['corpus']}: target tokens/s of timed updates after warm-up, model "
        "FLOP/s and MFU against the GPU's dense peak (bench/flops.py):",
        "",
    ]
    header = ["model (D, layers, FFN, V)", "precision", "compile", "tokens/update", "tgt tokens/s"]
    header += ["TFLOP/s", "MFU", "loss", "GiB"]
    return [*out, markdown_table(header, [train_row(r) for r in train["runs"]], "lllrrrrlr"), ""]


def train_row(r: dict[str, Any]) -> list[str]:
    """One run's cells of the training table; a skipped run's reason in the first measured one."""
    m = r["model"]
    model = f"{r['name']} ({m['d_model']}, {m['layers']}, {m['d_ff']}, {m['vocab']})"
    head = [model, r["precision"], "yes" if r["compile"] else "no", fmt(r["max_tokens"])]
    if r["status"] != "ran":
        return [*head, f"skipped: {r['reason']}", "", "", "", ""]
    mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    memory = "n/a" if r["max_memory_gib"] is None else fmt(r["max_memory_gib"])
    loss = f"{r['loss_first']:.2f} → {r['loss_last']:.2f}"
    return [*head, fmt_whole(r["target_tokens_per_s"]), fmt(r["model_tflops_per_s"]), mfu, loss, memory]


def torchrun_lines(run: dict[str, Any]) -> list[str]:
    if "ddp_probe" not in run:
        return []
    probe, train = run["ddp_probe"], run["pipeline_train"]
    return [
        f"**torchrun --nproc_per_node 1**: DDP probe on {probe.get('backend', '?')}, exit "
        f"{probe['returncode']}, all_reduce right: {probe.get('all_reduce_ok')}; `-m pipeline train` "
        f"exit {train['returncode']}: {json.dumps(train['summary'])}.",
        "",
    ]


def decode_lines(dec: dict[str, Any]) -> list[str]:
    if not dec.get("runs"):
        return []
    out = [f"**Decoding** on {dec['device']} ({dec['workers']} worker), {dec['source']}:", ""]
    search = lambda beam: "greedy" if beam == 1 else f"beam {beam}"
    rows = [
        [search(r["beam"]), fmt(r["sentences_per_s"], 1), fmt_whole(r["output_tokens_per_s"])]
        for r in dec["runs"]
    ]
    return [*out, markdown_table(["search", "sentences/s", "tokens/s"], rows, "lrr"), ""]


def serve_lines(serve: dict[str, Any]) -> list[str]:
    if serve.get("status") != "ran":
        return [f"**Serving**: {serve.get('reason', serve.get('status', 'not run'))}.", ""] if serve else []
    rows = [[k, str(v)] for k, v in serve["metrics"].items()]
    return [
        f"**Serving** (bench/serve_load.py), {serve['source']}:",
        "",
        markdown_table(["metric", "value"], rows, "lr"),
        "",
    ]


def refuse_without_gpu() -> None:
    """Stop before anything is written: the real check needs a GPU that torch sees."""
    built = (
        f"torch {torch.__version__}, built with CUDA {torch.version.cuda}"
        if torch.version.cuda
        else (f"torch {torch.__version__}, a CPU-only build")
    )
    click.echo(
        "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False; "
        f"{built}), and this check needs one. Run it on a GPU machine, or rehearse it on the CPU with "
        "`bash bench/gpu_check.sh --dry-run --out DIR`.",
        err=True,
    )
    sys.exit(2)


def check_out(out: Path | None, dry_run: bool) -> Path:
    """Where to write: reports/ for the real run; a folder other than reports/ for the dry run."""
    reports = REPO / "reports"
    if not dry_run:
        return out or reports
    if out is None or out.resolve() == reports.resolve():
        raise click.UsageError(
            "--dry-run writes only where --out says, and never to reports/: give --out DIR"
        )
    return out


@click.command()
@click.option("--dry-run", is_flag=True, help="CPU, tiny sizes, seconds: the rehearsal of every code path.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for gpu.json and bench.md's GPU section (default reports/; required with --dry-run).",
)
@click.option(
    "--params", "params_file", type=click.Path(dir_okay=False, path_type=Path), default=REPO / "params.yaml"
)
@click.option(
    "--bin",
    "bin_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Binarized corpus to train on (default: data/bin if present, else synthetic).",
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model directory to decode with (default: data/model if present).",
)
@click.option(
    "--test-src",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Source lines to decode (default: data/clean/test/<the first test set>.src if present).",
)
@click.option(
    "--skip", multiple=True, type=click.Choice(list(SECTIONS)), help="Leave a section out (repeatable)."
)
def main(
    dry_run: bool,
    out: Path | None,
    params_file: Path,
    bin_dir: Path | None,
    model_dir: Path | None,
    test_src: Path | None,
    skip: tuple[str, ...],
) -> None:
    """Run the GPU check (see the module's docstring); exit 1 if anything failed, 2 without a GPU."""
    if not dry_run and not torch.cuda.is_available():
        refuse_without_gpu()
    out = check_out(out, dry_run)
    params = P.load(params_file)
    device = torch.device("cpu") if dry_run else torch.device("cuda", 0)
    if dry_run:
        torch.set_num_threads(1)  # tiny sizes run fastest on one thread, and the machine is shared
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        check = Check(
            params, make_sizes(params, dry_run), device, dry_run, Path(tmp), bin_dir, model_dir, test_src
        )
        report: dict[str, Any] = {
            "format": FORMAT,
            "dry_run": dry_run,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": "bash bench/gpu_check.sh " + " ".join(sys.argv[1:]),
            "limit_seconds": check.sizes.limit_s,
            "device": device_section(check),
            "sections": {},
        }
        for name in SECTIONS:
            if name in skip:
                report["sections"][name] = {"status": "skipped", "reason": "--skip", "seconds": 0.0}
            else:
                report["sections"][name] = run_section(check, name)
        report["total_seconds"] = round(check.elapsed(), 1)
    report["problems"] = problems(report)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "gpu.json", report)
    write_section(out / "bench.md", GPU_START, GPU_END, markdown(report))
    say(f"done in {report['total_seconds']:.0f} s: {out / 'gpu.json'}, {out / 'bench.md'}")
    for problem in report["problems"]:
        say(f"PROBLEM: {problem}")
    sys.exit(1 if report["problems"] else 0)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
