"""What the training benchmark (bench/train_speed.py) is made of: the sizes of a
run, the synthetic batch, the systems that take one whole update on it (ours, UpdateStep itself, and
its peers HF Marian and torch.nn.Transformer doing the same math in stock torch code), and the
rounds in which they take turns.

Symbols: B sentences, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.common import TINY
from bench.timing import measure_round
from pipeline import params as P
from pipeline.data.batching import Batch
from pipeline.interop.hf_export import hf_config
from pipeline.model.transformer import build_model
from pipeline.tokens import BOS, EOS, N_SPECIAL, PAD
from pipeline.training.distributed import Dist
from pipeline.training.optim import inverse_sqrt, parameter_groups
from pipeline.training.step import UpdateStep, resolve_train

SYSTEMS = ("ours", "hf-marian", "torch-nn-transformer")
SYNTHETIC = "train_synthetic"  # the task of the synthetic batch's rows, with its size: train_synthetic_128x16
COMPILED = "_compiled"  # in the task of the same systems under torch.compile

StepFn = Callable[[Batch], Any]  # one whole update on a batch


@dataclass(frozen=True)
class Setup:
    """Sizes of one benchmark run: the full ones or tiny ones (--smoke)."""

    model: P.ModelParams
    vocab: int
    batch: int  # sentences per synthetic batch
    length: int  # tokens per row, source and target (with EOS / BOS)
    seconds: float  # timed per (system, precision), split over the repeats
    repeats: int
    warmup: int  # updates before timing
    smoke: bool
    compiled: bool = False  # every system's forward under torch.compile (train.compile)
    device: str = "cpu"  # train.device: cpu, or cuda (the GPU check)

    @property
    def task(self) -> str:
        """train_synthetic_128x16; _compiled for the compiled systems, _cuda on the GPU."""
        compiled = COMPILED if self.compiled else ""
        on_gpu = "_cuda" if self.device == "cuda" else ""
        return f"{SYNTHETIC}{compiled}{on_gpu}_{self.batch}x{self.length}"


def make_setup(
    params: P.Params,
    smoke: bool,
    seconds: float,
    repeats: int,
    device: str = "cpu",
    shape: tuple[int, int] = (128, 16),
) -> Setup:
    """The full sizes at `shape` (sentences, tokens a row), or tiny ones for --smoke."""
    if smoke:
        tiny = dataclasses.replace(TINY.of(params.model), max_positions=64)
        return Setup(tiny, 300, 8, 8, 0.05, 1, 1, True, device=device)
    batch, length = shape
    return Setup(params.model, 8000, batch, length, seconds, repeats, 3, False, device=device)


def with_precision(
    params: P.Params, model: P.ModelParams, precision: str, compiled: bool = False, device: str = "cpu"
) -> P.Params:
    """params with this model section, train.precision, .compile and .device, validated like params.yaml."""
    raw = dataclasses.replace(params, model=model).to_dict()
    raw["train"].update(precision=precision, compile=compiled, device=device)
    return P.from_dict(raw)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """What the update step does: bf16 autocast, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


# --- batches ------------------------------------------------------------------------


def synthetic_batch(vocab: int, batch: int, length: int, seed: int) -> Batch:
    """B rows of `length` random ids each side, no padding: src ids+EOS, tgt BOS+ids / ids+EOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(N_SPECIAL, vocab, (batch, length - 1), generator=g)
    tgt = torch.randint(N_SPECIAL, vocab, (batch, length - 1), generator=g)
    eos, bos = torch.full((batch, 1), EOS), torch.full((batch, 1), BOS)
    return Batch(
        src=torch.cat([src, eos], 1),
        tgt_in=torch.cat([bos, tgt], 1),
        tgt_out=torch.cat([tgt, eos], 1),
        n_src_tokens=batch * length,
        n_tgt_tokens=batch * length,
        indices=np.arange(batch),
    )


# --- the systems: each builder -> a step function doing one whole update -------------


def ours(params: P.Params, vocab: int, seed: int) -> StepFn:
    """pipeline.training.step.UpdateStep itself: the update training runs, built with no files (it
    copies each batch to train.device, as training does)."""
    torch.manual_seed(seed)
    device = torch.device(params.train.device)
    model = build_model(params.model, vocab, vocab).to(device).train()
    step = UpdateStep(resolve_train(params, device), model, device, Dist())

    def update(batch: Batch) -> tuple[float, int]:
        done = step.update([batch])
        if done is None:  # a non-finite loss: the update was skipped, and a skipped one is no timing
            raise RuntimeError(
                "ours: a non-finite loss, so the update was skipped: these settings diverge "
                "(try --precisions fp32); the benchmark stops rather than time skipped updates"
            )
        return done

    return update


def peer_step(model: nn.Module, forward: Callable, params: P.Params) -> StepFn:
    """The math of our update around a peer's forward, written as stock torch code.

    Same loss, normalization, clipping, AdamW settings and decay groups as
    ours, but torch's default implementations (AdamW's for-loop on CPU), not
    pipeline.training.optim's: a speed-up there counts for ours only. With
    train.compile the forward and the loss run under torch.compile, as ours do.
    """
    t, device = params.train, torch.device(params.train.device)
    model.to(device)
    optimizer = torch.optim.AdamW(
        parameter_groups(model.train(), t.weight_decay), lr=t.lr, betas=t.betas, eps=t.eps
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: inverse_sqrt(k + 1, t.warmup_steps))

    def loss_of(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        with autocast(t.precision, device):
            logits = forward(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            tgt_out.flatten(),
            ignore_index=PAD,
            reduction="sum",
            label_smoothing=t.label_smoothing,
        )

    summed = torch.compile(loss_of) if t.compile else loss_of

    def step(batch: Batch) -> tuple[float, int]:
        batch = batch.to(device, non_blocking=True)  # as ours copies it
        loss = summed(batch.src, batch.tgt_in, batch.tgt_out)
        (loss / batch.n_tgt_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        value = float(loss.detach())  # a sync at the end of each update, as ours has
        if not math.isfinite(value):
            raise RuntimeError("a peer: a non-finite loss: these settings diverge (try --precisions fp32)")
        return value, batch.n_tgt_tokens

    return step


def hf_marian(params: P.Params, vocab: int, seed: int) -> StepFn:
    """MarianMTModel (post-LN, its only layout) at our dimensions; random weights, nothing from the hub."""
    from transformers import MarianMTModel

    torch.manual_seed(seed)
    config = hf_config("marian", params.model, vocab, vocab)  # the shape export-hf writes
    config.use_cache = False
    config.forced_eos_token_id = None
    model = MarianMTModel(config)

    def forward(src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return model(
            input_ids=src,
            attention_mask=src != PAD,
            decoder_input_ids=tgt_in,
            decoder_attention_mask=tgt_in != PAD,
            use_cache=False,
        ).logits

    return peer_step(model, forward, params)


class PlainTransformer(nn.Module):
    """torch.nn.Transformer (pre-LN, batch-first) with a tied embedding and sinusoidal positions."""

    positions: torch.Tensor  # (L, D), a buffer

    def __init__(self, cfg: P.ModelParams, vocab: int):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Embedding(vocab, d, padding_idx=PAD)
        self.core = nn.Transformer(
            d,
            cfg.n_heads,
            cfg.n_encoder_layers,
            cfg.n_decoder_layers,
            cfg.d_ff,
            cfg.dropout,
            cfg.activation,
            batch_first=True,
            norm_first=True,
        )
        self.dropout = nn.Dropout(cfg.dropout)
        self.scale = math.sqrt(d) if cfg.scale_embeddings else 1.0
        pos = torch.arange(cfg.max_positions, dtype=torch.float32)[:, None]  # (L, 1)
        angle = pos * torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))  # (L, D/2)
        table = torch.stack([angle.sin(), angle.cos()], -1).flatten(1)  # (L, D): sin, cos interleaved
        self.register_buffer("positions", table, persistent=False)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) -> (B, L, D)."""
        return self.dropout(self.embed(ids) * self.scale + self.positions[: ids.size(1)])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V)."""
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # True = may NOT attend
        src_pad = src == PAD  # (B, S), True = padding, as nn.Transformer wants
        h = self.core(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return h @ self.embed.weight.t()


def torch_transformer(params: P.Params, vocab: int, seed: int) -> StepFn:
    torch.manual_seed(seed)
    with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first": an eval-only fast path
        warnings.simplefilter("ignore", UserWarning)
        model = PlainTransformer(params.model, vocab)
    return peer_step(model, model, params)


BUILDERS: dict[str, Callable[[P.Params, int, int], StepFn]] = {
    "ours": ours,
    "hf-marian": hf_marian,
    "torch-nn-transformer": torch_transformer,
}


def available_systems() -> list[str]:
    """Every system whose library is installed (transformers is not a dependency of the pipeline)."""
    try:
        import transformers  # noqa: F401  (importing it is the check: a broken install counts as none)
    except ImportError:
        return [s for s in SYSTEMS if s != "hf-marian"]
    return list(SYSTEMS)


def rates_by_round(
    steps: Mapping[str, StepFn],
    batch: Batch,
    setup: Setup,
    rng: random.Random,
    say: Callable[[str], None],
    label: str,
) -> dict[str, list[float]]:
    """Each system's tokens/s on `batch` in each of setup.repeats rounds (bench.timing.measure_round),
    after setup.warmup updates each; every round's rates are said, under `label`."""
    for step in steps.values():
        for _ in range(setup.warmup):
            step(batch)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    calls = {name: functools.partial(step, batch) for name, step in steps.items()}
    for round_ in range(setup.repeats):
        measured = measure_round(calls, batch.n_tgt_tokens, setup.seconds / setup.repeats, rng)
        for name, rate in measured.items():
            rates[name].append(rate)
        say(
            f"{label} round {round_ + 1}/{setup.repeats}: "
            + ", ".join(f"{n} {r[-1]:,.0f}" for n, r in rates.items())
            + " tok/s"
        )
    return rates
