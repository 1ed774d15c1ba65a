"""Stage train: a Transformer on the binarized corpus, with exact resume, early stopping and MLflow.

    python -m pipeline train --params params.yaml --bin data/bin --bpe data/bpe \\
        --out data/model --checkpoints data/checkpoints --log reports/train

Data parallel over N GPUs (NCCL) or N CPU processes (gloo), same options:

    torchrun --standalone --nproc_per_node N -m pipeline train --params params.yaml --bin data/bin ...

Each rank trains on its shard of every epoch's batch list (data.shard), and
an update's loss is normalized by its target tokens summed over all ranks, so
N ranks with update_freq u take the same steps as one process with update_freq
N*u. Only rank 0 validates and writes checkpoints, logs, the model and MLflow.

Outputs:
  data/model/          model.pt (checkpoint.model_payload of the best checkpoint by
                       train.early_stop_metric, or the average of the last
                       train.average_last ones), params.yaml, the sentencepiece
                       model(s), mlflow_run.json; written at the end, atomically.
  data/checkpoints/    last.pt (the full training state: written at every
                       validation and at the end), best.pt and ckpt_<step>.pt for
                       the last train.keep_last validations (model payloads only).
  reports/train/       steps.tsv (step epoch loss lr tokens_per_s, every
                       train.log_every updates; loss is the label-smoothed loss per
                       target token over the interval), valid.tsv (step epoch
                       val_loss val_bleu), summary.json (tokens_per_s: target tokens
                       per second of update time; train_seconds: wall time, validation
                       included; both summed over resumed sessions).

val_loss is the per-token NLL of the val split (no label smoothing, no
dropout), so exp(val_loss) is its perplexity; val_bleu is sacreBLEU of greedy
decoding. Both logs are rewritten from the training state at each validation,
so a resumed run's logs equal an uninterrupted run's (up to the timing column).

Exact resume: an epoch's batch list is a pure function of (seed, epoch), and
last.pt holds the model, optimizer, scheduler, grad scaler, every RNG, and the
position (epoch, batches done in it). A run killed at any moment and started
again ends with bitwise the same weights as one never interrupted (on one
device and thread count). Validation restores the RNG state it found, so it
never shifts the dropout stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch
import torch.distributed as torch_dist
import yaml
from tqdm import tqdm

from pipeline import params as P
from pipeline import sources
from pipeline.data.batching import Batch, ParallelData, collate, shard, token_batches
from pipeline.data.vocab import Vocab
from pipeline.decoding.search import translate_ids
from pipeline.devices import torch_device
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json, write_lines, write_text
from pipeline.model import checkpoint
from pipeline.model.transformer import build_model, count_parameters
from pipeline.tracking import Tracker, tracking_uri
from pipeline.training.optim import build_optimizer, build_scheduler

STATE_FORMAT = "nmt-pipeline/train-state/1"
LAST, BEST = "last.pt", "best.pt"
STEPS_HEADER = ("step", "epoch", "loss", "lr", "tokens_per_s")
VALID_HEADER = ("step", "epoch", "val_loss", "val_bleu")
# Settings a resumed run may change: they alter no weight (skip_bad_batches
# only acts where the saved run would have stopped, which is how one recovers).
MAY_CHANGE = {"train.log_every", "train.threads", "train.skip_bad_batches"}
# Greedy validation's output limit; fixed here so that decode.* never invalidates training.
VAL_MAX_LEN_A, VAL_MAX_LEN_B = 1.2, 10
ARTIFACT_MAX_BYTES = 200 * 2**20


@dataclass(frozen=True)
class Paths:
    bin_dir: Path
    bpe_dir: Path
    out_dir: Path
    ckpt_dir: Path
    log_dir: Path


@dataclass(frozen=True)
class Dist:
    """Where this process sits in a torchrun job (rank 0 of 1 without one)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


@dataclass
class Progress:
    """Everything about the run so far that is not a tensor; saved in last.pt as a plain dict."""

    step: int = 0  # updates done
    epoch: int = 1  # epoch of the next batch
    position: int = 0  # batches of that epoch done (this rank's list)
    tokens: int = 0  # target tokens trained on, all ranks
    train_seconds: float = 0.0  # wall time of training, validation included
    update_seconds: float = 0.0  # wall time in updates only (for tokens/s)
    best_step: int | None = None
    best_metric: float | None = None  # higher is better (BLEU, or -val_loss)
    bad_validations: int = 0  # since the best one: early stopping's counter
    skipped: int = 0  # non-finite updates skipped (train.skip_bad_batches)
    interval: list = field(default_factory=lambda: [0.0, 0, 0.0])  # loss sum, tokens, seconds since last row
    steps: list = field(default_factory=list)  # steps.tsv rows
    valid: list = field(default_factory=list)  # valid.tsv rows
    kept: list = field(default_factory=list)  # steps whose ckpt_<step>.pt is kept
    stopped: str | None = None  # max_epochs | max_steps | early_stopping once done
    run: dict | None = None  # the MLflow run: {"run_id", "tracking_uri"}


# --- setup: device, processes, data ------------------------------------------------


def init_distributed(device: str) -> Dist:
    """Join the torchrun job that WORLD_SIZE/RANK/LOCAL_RANK describe, if any."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Dist()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    torch_dist.init_process_group("nccl" if cuda else "gloo")
    return Dist(rank, world_size, local_rank)


def close_distributed(dist: Dist) -> None:
    if dist.enabled and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def check_precision(precision: str, device: torch.device) -> None:
    if precision == "fp16" and device.type != "cuda":
        raise UserError(
            "train.precision fp16 needs a GPU (its loss scaling is CUDA-only); use bf16 or fp32 on CPU"
        )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every CUDA device too


def fitting_sentences(data: ParallelData, cfg: P.ModelParams) -> np.ndarray:
    """Indices of sentences whose positions fit model.max_positions (a learned table cannot grow)."""
    src, tgt = data.src.lengths, data.tgt.lengths
    if cfg.arch == "decoder_only":
        ok = src + tgt + 2 <= cfg.max_positions  # source, EOS, SEP, target
    else:
        ok = np.maximum(src, tgt) + 1 <= cfg.max_positions  # + EOS / + BOS
    return np.flatnonzero(ok)


def code_fingerprint() -> dict[str, str]:
    """sha256 of every source file the train stage runs, by path in the package: a saved run
    resumes only under the code that wrote it (dvc.yaml re-runs the stage when any of them changes)."""
    return sources.fingerprint("pipeline.stages.train")


def data_fingerprint(bin_dir: Path, vocab: Vocab) -> str:
    """sha256 of the sentence offsets and the subword models: changes when the data does."""
    digest = hashlib.sha256()
    for path in [bin_dir / f"{s}.{side}.idx" for s in ("train", "val") for side in ("src", "tgt")]:
        digest.update(path.read_bytes())
    for path in vocab.model_files():
        digest.update(path.read_bytes())
    return digest.hexdigest()


# --- RNG state ------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every generator training may draw from, as plain values and tensors."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


# --- the trainer --------------------------------------------------------------------


class Trainer:
    """Model, optimizer and data of one run; `run()` trains, `finish()` writes the outputs."""

    def __init__(self, params: P.Params, paths: Paths, dist: Dist = Dist()):
        self.params, self.paths, self.dist = params, paths, dist
        t = params.train
        self.device = torch_device(t.device, index=dist.local_rank, key="train.device")
        check_precision(t.precision, self.device)
        if t.threads:
            torch.set_num_threads(t.threads)
        seed_everything(t.seed)
        self.vocab = Vocab.load(paths.bpe_dir)
        self.train_data = ParallelData.load(paths.bin_dir, "train")
        self.val_data = ParallelData.load(paths.bin_dir, "val")
        self.fingerprint = data_fingerprint(paths.bin_dir, self.vocab)
        self.code = code_fingerprint()
        self.train_ids = self._fitting(self.train_data, "train")
        self.val_ids = self._fitting(self.val_data, "val")
        self.model = build_model(params.model, self.vocab.src_size, self.vocab.tgt_size).to(self.device)
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self.net = self._wrap(self.model)
        self.optimizer = build_optimizer(self.model, t)
        self.scheduler = build_scheduler(self.optimizer, t.warmup_steps)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.precision == "fp16")
        torch.manual_seed(t.seed + dist.rank)  # the dropout stream: one per rank, after a shared init
        self.progress = Progress()
        self.tracker = Tracker.disabled()
        self.last_lr = t.lr
        self._started, self._total_steps = (time.monotonic(), 0), 0  # for the ETA, set per session
        self.n_batches = len(self.epoch_batches(1))
        if self.n_batches == 0:
            raise UserError(
                f"{paths.bin_dir}: too little training data for {dist.world_size} processes "
                "(fewer batches than processes); lower train.max_tokens or run fewer processes"
            )
        self._val_refs: list[str] | None = None

    def _fitting(self, data: ParallelData, split: str) -> np.ndarray:
        ids = fitting_sentences(data, self.params.model)
        if len(ids) == 0:
            raise UserError(
                f"{self.paths.bin_dir}: no {split} sentence fits model.max_positions="
                f"{self.params.model.max_positions}; raise it, or check the {split} split"
            )
        if len(ids) < len(data):
            self.say(
                f"train: dropped {len(data) - len(ids)} of {len(data)} {split} sentences longer than "
                f"model.max_positions={self.params.model.max_positions} allows"
            )
        return ids

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        net = model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer changes in training (positions are filtered to fit), so none is broadcast.
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=ids, broadcast_buffers=False
            )
            net = self.ddp
        return torch.compile(net) if self.params.train.compile else net

    def say(self, message: str) -> None:
        if self.dist.main:
            tqdm.write(message, file=sys.stderr)

    # --- batches ---

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of sentence indices for `epoch`: a pure function of (seed, epoch)."""
        ids, t = self.train_ids, self.params.train
        src, tgt = self.train_data.src.lengths[ids], self.train_data.tgt.lengths[ids]
        batches = token_batches(src, tgt, t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch)
        batches = [ids[b] for b in batches]
        return shard(batches, self.dist.rank, self.dist.world_size) if self.dist.enabled else batches

    # --- one update ---

    def autocast(self) -> contextlib.AbstractContextManager:
        precision = self.params.train.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def all_sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.dist.enabled:
            torch_dist.all_reduce(value)
        return value

    def train_step(self, batches: list[Batch]) -> tuple[float, int] | None:
        """One update over micro-batches (update_freq of them); -> (loss sum, target tokens), all ranks.

        None when the loss was not finite and train.skip_bad_batches skipped the update.
        """
        t = self.params.train
        n_tokens = sum(b.n_tgt_tokens for b in batches)
        if self.dist.enabled:
            count = torch.tensor(n_tokens, dtype=torch.float64, device=self.device)
            n_tokens = int(self.all_sum(count).item())
        # DDP averages gradients over ranks; scaling by world_size makes them sum / global tokens.
        scale = self.dist.world_size / n_tokens
        total = torch.zeros((), device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True)
            sync = i == len(batches) - 1 or self.ddp is None
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                with self.autocast():
                    loss = self.net(batch.src, batch.tgt_in, batch.tgt_out, t.label_smoothing)
                self.scaler.scale(loss * scale).backward()
            total += loss.detach()
        total = self.all_sum(total)
        if not torch.isfinite(total):
            self.bad_update()
            return None
        self.optimizer_step()
        return float(total), n_tokens

    def optimizer_step(self) -> None:
        self.last_lr = self.optimizer.param_groups[0]["lr"]
        self.scaler.unscale_(self.optimizer)
        if self.params.train.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.params.train.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def bad_update(self) -> None:
        """A non-finite loss: skip the update (train.skip_bad_batches), or stop without saving."""
        self.optimizer.zero_grad(set_to_none=True)
        p, step = self.progress, self.progress.step + 1
        if self.params.train.skip_bad_batches:
            p.skipped += 1
            self.say(
                f"warning: non-finite loss at update {step} (epoch {p.epoch}); "
                f"skipped it ({p.skipped} so far)"
            )
            return
        raise UserError(
            f"non-finite loss at update {step} (epoch {p.epoch}): training diverged; {self.last_good()}. "
            "Lower train.lr or raise train.warmup_steps (then delete the checkpoints), or set "
            "train.skip_bad_batches: true to skip such updates and resume"
        )

    def last_good(self) -> str:
        path = self.paths.ckpt_dir / LAST
        if not path.is_file():
            return "no checkpoint was written yet"
        step = checkpoint.load(path)["progress"]["step"]  # raises if it is not whole
        return f"the last checkpoint, {path} (update {step}), is intact"

    # --- the loop ---

    def run(self) -> None:
        """Train until max_steps, max_epochs or early stopping; a finished run does nothing."""
        if self.progress.stopped is not None:
            return
        with self.progress_bar() as bar:
            while self.progress.stopped is None:
                self.train_epoch(bar)

    def train_epoch(self, bar: tqdm) -> None:
        """The rest of the current epoch, from progress.position, one update at a time."""
        p, update_freq = self.progress, self.params.train.update_freq
        epoch = p.epoch
        batches = self.epoch_batches(epoch)
        for start in range(p.position, len(batches), update_freq):
            group = batches[start : start + update_freq]
            began = time.perf_counter()
            result = self.train_step([collate(self.train_data, ids) for ids in group])
            seconds = time.perf_counter() - began
            p.position = start + len(group)
            end_of_epoch = p.position == len(batches)
            if end_of_epoch:
                p.epoch, p.position = epoch + 1, 0
            if result is not None:
                self.record_update(epoch, *result, seconds, bar)
            self.after_update(epoch, result is not None, end_of_epoch)
            if p.stopped is not None:
                return

    def record_update(self, epoch: int, loss_sum: float, n_tokens: int, seconds: float, bar: tqdm) -> None:
        p, t = self.progress, self.params.train
        p.step += 1
        p.tokens += n_tokens
        p.update_seconds += seconds
        p.train_seconds += seconds
        interval = p.interval
        interval[0] += loss_sum
        interval[1] += n_tokens
        interval[2] += seconds
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss_sum / n_tokens:.3f}",
            lr=f"{self.last_lr:.2e}",
            tok_s=f"{n_tokens / max(seconds, 1e-9):,.0f}",
            refresh=False,
        )
        if p.step % t.log_every:
            return
        row = [p.step, epoch, interval[0] / interval[1], self.last_lr, interval[1] / max(interval[2], 1e-9)]
        p.steps.append(row)
        p.interval = [0.0, 0, 0.0]
        self.tracker.log_metrics({"train_loss": row[2], "lr": row[3], "tokens_per_s": row[4]}, p.step)
        if bar.disable:
            self.say(
                f"step {p.step} | epoch {epoch} | loss {row[2]:.4f} | lr {row[3]:.3e} | "
                f"{row[4]:,.0f} tok/s | eta {self.eta()}"
            )

    def eta(self) -> str:
        """Time left at this session's pace (a disabled tqdm bar counts nothing)."""
        step = self.progress.step
        done = max(step - self._started[1], 1)
        seconds = (time.monotonic() - self._started[0]) / done * max(self._total_steps - step, 0)
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"

    def progress_bar(self) -> tqdm:
        """A bar over the updates to do (shown on rank 0 when stderr is a terminal)."""
        t = self.params.train
        total = t.max_epochs * math.ceil(self.n_batches / t.update_freq)
        total = min(total, t.max_steps) if t.max_steps else total
        quiet = not (self.dist.main and sys.stderr.isatty())
        self._started, self._total_steps = (time.monotonic(), self.progress.step), total
        return tqdm(total=total, initial=self.progress.step, disable=quiet, unit="upd", dynamic_ncols=True)

    def after_update(self, epoch: int, updated: bool, end_of_epoch: bool) -> None:
        """Validate and checkpoint when due; decide whether to stop."""
        p, t = self.progress, self.params.train
        limit = None
        if t.max_steps and p.step >= t.max_steps:
            limit = "max_steps"
        elif end_of_epoch and p.epoch > t.max_epochs:
            limit = "max_epochs"
        scheduled = (updated and t.validate_every and p.step % t.validate_every == 0) or (
            end_of_epoch and not t.validate_every
        )
        if not (scheduled or limit):
            return
        began = time.perf_counter()
        rngs = self.gather_rng()
        improved = False
        if not (p.valid and p.valid[-1][0] == p.step):  # not again at a step already validated
            improved = self.validate(epoch)
        early = t.patience and p.bad_validations >= t.patience
        p.stopped = limit or ("early_stopping" if early else None)
        p.train_seconds += time.perf_counter() - began
        if self.dist.main:
            self.save(improved, rngs)

    # --- validation ---

    def validate(self, epoch: int) -> bool:
        """Score the val split on rank 0, share the result, update best/patience; -> improved."""
        result = self.evaluate() if self.dist.main else None
        if self.dist.enabled:
            box = [result]
            torch_dist.broadcast_object_list(box, src=0)
            result = box[0]
        val_loss, val_bleu = result
        p, t = self.progress, self.params.train
        p.valid.append([p.step, epoch, val_loss, val_bleu])
        metric = val_bleu if t.early_stop_metric == "bleu" else -val_loss
        improved = math.isfinite(metric) and (p.best_metric is None or metric > p.best_metric)
        if improved:
            p.best_metric, p.best_step, p.bad_validations = metric, p.step, 0
        else:
            p.bad_validations += 1
        p.kept = ([*p.kept, p.step])[-t.keep_last :]
        metrics = {"val_loss": val_loss} | ({"val_bleu": val_bleu} if t.val_bleu else {})
        self.tracker.log_metrics(metrics, p.step)
        best = "" if p.best_step is None else f" | best step {p.best_step}"
        bleu = f" | val_bleu {val_bleu:.2f}" if t.val_bleu else ""
        self.say(f"valid step {p.step} | epoch {epoch} | val_loss {val_loss:.4f}{bleu}{best}")
        return improved

    def evaluate(self) -> tuple[float, float | None]:
        """(val NLL per token, greedy BLEU or None); leaves every RNG as it found it."""
        saved = rng_state(self.device)
        try:
            val_loss = self.val_loss()
            val_bleu = self.val_bleu() if self.params.train.val_bleu else None
        finally:
            self.model.train()
            set_rng_state(saved, self.device)
        return val_loss, val_bleu

    @torch.no_grad()
    def val_loss(self) -> float:
        self.model.eval()
        ids, data = self.val_ids, self.val_data
        batches = token_batches(
            data.src.lengths[ids],
            data.tgt.lengths[ids],
            self.params.train.max_tokens,
            shuffle=False,
            seed=0,
            epoch=0,
        )
        total, tokens = 0.0, 0
        for b in batches:
            batch = collate(data, ids[b]).to(self.device)
            with self.autocast():
                total += float(self.model(batch.src, batch.tgt_in, batch.tgt_out, smoothing=0.0))
            tokens += batch.n_tgt_tokens
        return total / tokens

    def val_bleu(self) -> float:
        seqs = [self.val_data.src[i].tolist() for i in self.val_ids]
        with self.autocast():
            hyps = translate_ids(
                self.model,
                seqs,
                beam=1,
                length_penalty=1.0,
                max_len_a=VAL_MAX_LEN_A,
                max_len_b=VAL_MAX_LEN_B,
                batch_tokens=self.params.train.max_tokens,
                device=self.device,
            )
        texts = [self.vocab.decode_tgt(h[0].tokens) for h in hyps]
        if self._val_refs is None:
            self._val_refs = [self.vocab.decode_tgt(self.val_data.tgt[i].tolist()) for i in self.val_ids]
        return sacrebleu.corpus_bleu(texts, [self._val_refs]).score

    # --- checkpoints ---

    def gather_rng(self) -> list[dict[str, Any]]:
        """Every rank's RNG state (each draws its own dropout masks), for rank 0 to save."""
        state = rng_state(self.device)
        if not self.dist.enabled:
            return [state]
        states: list[Any] = [None] * self.dist.world_size
        torch_dist.all_gather_object(states, state)
        return states

    def state_dict(self, rngs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "params": self.params.to_dict(),
            "world_size": self.dist.world_size,
            "data": self.fingerprint,
            "code": self.code,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rngs,
            "progress": dataclasses.asdict(self.progress),
        }

    def save(self, improved: bool, rngs: list[dict[str, Any]]) -> None:
        """ckpt_<step>.pt, best.pt if improved, then last.pt: a crash between them redoes the same."""
        ckpt_dir, p = self.paths.ckpt_dir, self.progress
        payload = checkpoint.model_payload(
            self.model, self.params, self.vocab.src_size, self.vocab.tgt_size, p.step
        )
        save_file(ckpt_dir / f"ckpt_{p.step}.pt", payload, ckpt_dir)
        if improved:
            save_file(ckpt_dir / BEST, payload, ckpt_dir)
        save_file(ckpt_dir / LAST, self.state_dict(rngs), ckpt_dir)
        for path in ckpt_dir.glob("ckpt_*.pt"):
            if path.stem.removeprefix("ckpt_") not in {str(s) for s in p.kept}:
                path.unlink(missing_ok=True)
        self.write_logs()

    def resume(self, on_change: str = "refuse") -> None:
        """Continue from last.pt if there is one (refusing, or restarting, if it is another run's)."""
        path = self.paths.ckpt_dir / LAST
        if not path.is_file():
            return
        saved = checkpoint.load(path, map_location=self.device)
        if saved.get("format") != STATE_FORMAT:
            raise UserError(
                f"{path}: not a training state of this pipeline; delete {self.paths.ckpt_dir} to start afresh"
            )
        changes = self.changes_from(saved)
        if changes:
            what = f"{path} is from a run with other settings ({'; '.join(changes[:4])})"
            if on_change == "refuse":
                raise UserError(
                    f"{what}; delete {self.paths.ckpt_dir} to train afresh, or undo those changes to resume"
                )
            self.say(f"train: {what}; deleting {self.paths.ckpt_dir} and starting afresh")
            if self.dist.main:
                shutil.rmtree(self.paths.ckpt_dir)
            return
        self.load_state(saved, path)
        p = self.progress
        state = "finished; rebuilding its outputs" if p.stopped else f"epoch {p.epoch}, batch {p.position}"
        self.say(f"train: resuming from step {p.step} ({state})")

    def changes_from(self, saved: dict[str, Any]) -> list[str]:
        """What differs between a saved run and this one: params, data, code, number of processes."""
        old, new = _weight_settings(saved["params"]), _weight_settings(self.params.to_dict())
        changes = [
            f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(set(old) | set(new))
            if k not in MAY_CHANGE and old.get(k) != new.get(k)
        ]
        if saved["data"] != self.fingerprint:
            changes.append(f"the data in {self.paths.bin_dir} or {self.paths.bpe_dir} changed")
        old_code = saved.get("code", {})
        edited = sorted(f for f in set(old_code) | set(self.code) if old_code.get(f) != self.code.get(f))
        if edited:
            names = ", ".join(f"pipeline/{f}" for f in edited[:3]) + (", ..." if len(edited) > 3 else "")
            changes.append(f"the training code changed ({names})")
        if saved["world_size"] != self.dist.world_size:
            changes.append(f"{saved['world_size']} processes -> {self.dist.world_size}")
        return changes

    def load_state(self, saved: dict[str, Any], path: Path) -> None:
        checkpoint.load_weights(self.model, saved["model"], path)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.scaler.load_state_dict(saved["scaler"])
        self.progress = Progress(**saved["progress"])
        set_rng_state(saved["rng"][self.dist.rank], self.device)

    # --- outputs ---

    def write_logs(self) -> None:
        p, log_dir = self.progress, self.paths.log_dir
        write_lines(log_dir / "steps.tsv", ["\t".join(STEPS_HEADER)] + [_tsv(row) for row in p.steps])
        write_lines(log_dir / "valid.tsv", ["\t".join(VALID_HEADER)] + [_tsv(row) for row in p.valid])

    def final_payload(self) -> tuple[dict[str, Any], int]:
        """The best checkpoint's payload, or the mean of the last average_last; -> (payload, k averaged)."""
        p, k, ckpt_dir = self.progress, self.params.train.average_last, self.paths.ckpt_dir
        if k > 0:
            steps = p.kept[-k:]
            return average([load_payload(ckpt_dir / f"ckpt_{s}.pt", s) for s in steps]), len(steps)
        if p.best_step is None:  # no finite validation metric ever: the last model it is
            return load_payload(ckpt_dir / f"ckpt_{p.kept[-1]}.pt", p.kept[-1]), 0
        return load_payload(ckpt_dir / BEST, p.best_step), 0

    def finish(self) -> dict[str, Any]:
        """Write data/model, the logs and summary.json (rank 0); close the MLflow run's records."""
        payload, averaged = self.final_payload()
        out = self.paths.out_dir
        with atomic_path(out) as tmp:
            tmp.mkdir()
            checkpoint.save(tmp / checkpoint.MODEL_FILE, payload)
            write_text(tmp / "params.yaml", yaml.safe_dump(self.params.to_dict(), sort_keys=False))
            for model_file in self.vocab.model_files():
                shutil.copy2(model_file, tmp / model_file.name)
            write_json(tmp / "mlflow_run.json", self.run_info())
        summary = self.summary(averaged)
        self.write_logs()
        write_json(self.paths.log_dir / "summary.json", summary)
        totals = {k: summary[k] for k in ("n_params", "train_seconds", "tokens_per_s")}
        self.tracker.log_metrics(totals, self.progress.step)
        self.tracker.log_artifacts(self.paths.log_dir, "train")
        self.tracker.log_artifact(out / "params.yaml", "model")
        if (out / checkpoint.MODEL_FILE).stat().st_size <= ARTIFACT_MAX_BYTES:
            self.tracker.log_artifact(out / checkpoint.MODEL_FILE, "model")
        return summary

    def run_info(self) -> dict[str, str | None]:
        """The MLflow run for later stages: this session's, else the one the state recorded, else none."""
        if self.tracker.enabled:
            return self.tracker.run_info()
        return self.progress.run or {"run_id": None, "tracking_uri": None}

    def summary(self, averaged: int) -> dict[str, Any]:
        """summary.json: tokens_per_s counts update time only; train_seconds includes validation."""
        p = self.progress
        best = next((row for row in p.valid if row[0] == p.best_step), [None] * 4)
        device = str(self.device)
        if self.device.type == "cuda":
            device = f"cuda ({torch.cuda.get_device_name(self.device)})"
        return {
            "n_params": count_parameters(self.model),
            "train_seconds": round(p.train_seconds, 3),
            "tokens_per_s": round(p.tokens / p.update_seconds, 1) if p.update_seconds else 0.0,
            "best_step": p.best_step,
            "best_val_bleu": best[3],
            "best_val_loss": best[2],
            "device": device,
            "precision": self.params.train.precision,
            "stopped": p.stopped,
            "steps": p.step,
            "epochs": p.epoch - 1 if p.position == 0 else p.epoch,
            "averaged": averaged,
            "skipped_updates": p.skipped,
            "world_size": self.dist.world_size,
        }

    # --- MLflow ---

    def open_tracker(self, enabled: bool) -> Tracker:
        """Start the MLflow run on rank 0, or reopen the one a resumed run recorded."""
        if not (enabled and self.dist.main):
            return self.tracker
        p, d, m = self.progress, self.params.data, self.params.model
        offline = self.paths.ckpt_dir
        if p.run and p.run.get("run_id"):
            uri = p.run.get("tracking_uri") or tracking_uri()
            self.tracker = Tracker(uri, p.run["run_id"], offline, owns_run=True)
        else:
            label = os.environ.get("DVC_EXP_NAME") or time.strftime("%Y-%m-%d %H:%M:%S")
            tags = {
                "stage": "train",
                "precision": self.params.train.precision,
                "device": str(self.device),
                "world_size": self.dist.world_size,
            }
            name = f"{d.src_lang}-{d.tgt_lang} {m.arch} {label}"
            self.tracker = Tracker.start(
                self.params.to_dict(), self.params.tracking.experiment, name, tags, offline_dir=offline
            )
            self.tracker.log_metrics({"n_params": count_parameters(self.model)}, 0)
        p.run = self.tracker.run_info()
        return self.tracker


def _weight_settings(params: dict[str, Any]) -> dict[str, Any]:
    """The model.* and train.* settings, flat: what a resumed run must share with the saved one."""
    return {k: v for k, v in P.flatten(params).items() if k.split(".")[0] in ("model", "train")}


def _tsv(row: list) -> str:
    return "\t".join("nan" if v is None else str(v) if isinstance(v, int) else f"{v:.6g}" for v in row)


def save_file(path: Path, obj: dict[str, Any], ckpt_dir: Path) -> None:
    """checkpoint.save, with a disk that is full (or read-only) as a user's error."""
    try:
        checkpoint.save(path, obj)
    except OSError as e:
        last = ckpt_dir / LAST
        then = "training starts afresh"
        if last.is_file():
            then = f"training resumes from {last}, which is intact"
        raise UserError(
            f"{path}: cannot write the checkpoint ({e.strerror or e}); free disk space or fix the "
            f"permissions, then rerun: {then}"
        ) from None


def load_payload(path: Path, step: int) -> dict[str, Any]:
    """A saved model payload, refusing one that is not from the step the training state names."""
    payload = checkpoint.load(path)
    if payload.get("step") != step:
        raise UserError(
            f"{path} is from step {payload.get('step')}, but the training state expects step "
            f"{step}; the checkpoints are mixed up: delete {path.parent} and retrain"
        )
    return payload


def average(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The element-wise mean of the payloads' weights (accumulated in float64); the rest from the last."""
    out = dict(payloads[-1])
    averaged = {}
    for name, last in payloads[-1]["model"].items():
        if last.is_floating_point():
            total = sum(pl["model"][name].double() for pl in payloads)
            averaged[name] = (total / len(payloads)).to(last.dtype)
        else:
            averaged[name] = last
    out["model"] = averaged
    return out


def remove_stale_temps(paths: Paths) -> None:
    """Temporaries a killed run left behind (atomic writes it never finished)."""
    for folder, pattern in (
        (paths.ckpt_dir, ".*.tmp"),
        (paths.log_dir, ".*.tmp"),
        (paths.out_dir.parent, f".{paths.out_dir.name}.*.tmp"),
    ):
        for stale in folder.glob(pattern) if folder.is_dir() else []:
            shutil.rmtree(stale, ignore_errors=True)


# --- the stage ------------------------------------------------------------------------
