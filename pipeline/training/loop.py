"""The training loop: epochs of updates, validation, early stopping, the logs, and the outputs.

`Trainer` builds the model and its `UpdateStep` and trains over the train
split's epochs (epochs.py) until max_steps, max_epochs or early stopping,
validating (validation.py: val loss, greedy val BLEU) and saving the `RunState`
when due; `finish()` writes data/model and reports/train (steps.tsv, valid.tsv,
summary.json). What each output holds and how a killed run resumes exactly:
docs/exact-resume.md.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from typing import Any

import torch
import yaml
from tqdm import tqdm

from pipeline import lineage
from pipeline import params as P
from pipeline.data.batching import collate
from pipeline.data.vocab import Vocab
from pipeline.devices import torch_device
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json, write_lines, write_text
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase, build_model, count_parameters
from pipeline.tracking.run_file import RUN_FILE, RunFile
from pipeline.training import signals
from pipeline.training.distributed import ALONE, Dist
from pipeline.training.epochs import TrainSplit
from pipeline.training.observer import Observer, Quiet, RunStart, mlflow_run
from pipeline.training.parent import start_from_parent
from pipeline.training.state import (
    Interval,
    LogRow,
    Paths,
    Progress,
    RunState,
    Validation,
    gather_rng,
    seed_everything,
)
from pipeline.training.step import UpdateStep, check_precision, resolve_train
from pipeline.training.validation import ValSplit

STEPS_HEADER = LogRow._fields
VALID_HEADER = Validation._fields


class Trainer:
    """Data, model and run state of one run; `run()` trains, `finish()` writes the outputs."""

    def __init__(self, params: P.Params, paths: Paths, dist: Dist = ALONE):
        self.device = torch_device(params.train.device, index=dist.local_rank, key="train.device")
        params = resolve_train(params, self.device)  # auto: what is used, in the state, logs and data/model
        self.params, self.paths, self.dist = params, paths, dist
        t = params.train
        check_precision(t.precision, self.device)
        if t.threads:
            torch.set_num_threads(t.threads)
        seed_everything(t.seed)
        self.vocab = Vocab.load(paths.bpe_dir)
        self.epochs = TrainSplit(params, paths, self.vocab, dist, self.say)
        model = build_model(params.model, self.vocab.src_size, self.vocab.tgt_size).to(self.device)
        # train.init_from: the parent's weights, before step 0; a resumed run's last.pt overwrites them.
        self.parent = start_from_parent(model, params, paths.bpe_dir, self.vocab)
        self.update = UpdateStep(params, model, self.device, dist)
        self.val = ValSplit(params, paths.bin_dir, self.vocab, self.update, self.say)
        torch.manual_seed(t.seed + dist.rank)  # the dropout stream: one per rank, after a shared init
        parent_sha = self.parent.model_sha256 if self.parent else None
        self.state = RunState(
            params, paths, dist, self.update, self.vocab, self.epochs.sampled_from, parent_sha
        )
        self.observer: Observer = Quiet()
        self._started, self._total_steps = (time.monotonic(), 0), 0  # for the ETA, set per session
        self.n_batches = self.epochs.n_batches
        if self.n_batches == 0:
            raise UserError(
                f"{paths.bin_dir}: too little training data for {dist.world_size} processes "
                "(fewer batches than processes); lower train.max_tokens or run fewer processes"
            )

    @property
    def model(self) -> Seq2SeqBase:
        return self.update.model

    @property
    def progress(self) -> Progress:
        return self.state.progress

    def say(self, message: str) -> None:
        if self.dist.main:
            tqdm.write(message, file=sys.stderr)

    # --- the loop ---

    def run(self) -> None:
        """Train until max_steps, max_epochs or early stopping; a finished run does nothing."""
        if self.progress.stopped is not None:
            return
        try:
            with self.progress_bar() as bar:
                while self.progress.stopped is None:
                    self.train_epoch(bar)
        finally:
            self.epochs.close()

    def train_epoch(self, bar: tqdm) -> None:
        """The rest of the current epoch, from progress.position, one update at a time."""
        p, update_freq = self.progress, self.params.train.update_freq
        epoch = p.epoch
        batches, data = self.epochs.batches(epoch), self.epochs.for_epoch(epoch)
        for start in range(p.position, len(batches), update_freq):
            group = batches[start : start + update_freq]
            began = time.perf_counter()
            result = self.update.update([collate(data, ids) for ids in group])
            if result is None:
                self.skip_or_stop()
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

    def skip_or_stop(self) -> None:
        """A non-finite loss (the update step dropped it): skip it (train.skip_bad_batches), or stop."""
        p, step = self.progress, self.progress.step + 1
        if self.params.train.skip_bad_batches:
            p.skipped += 1
            self.say(
                f"warning: non-finite loss at update {step} (epoch {p.epoch}); "
                f"skipped it ({p.skipped} so far)"
            )
            return
        raise UserError(
            f"non-finite loss at update {step} (epoch {p.epoch}): training diverged; "
            f"{self.state.last_good()}. Lower train.lr or raise train.warmup_steps (then delete the "
            "checkpoints), or set train.skip_bad_batches: true to skip such updates and resume"
        )

    def record_update(self, epoch: int, loss_sum: float, n_tokens: int, seconds: float, bar: tqdm) -> None:
        p, t, lr = self.progress, self.params.train, self.update.last_lr
        p.step += 1
        p.tokens += n_tokens
        p.update_seconds += seconds
        p.train_seconds += seconds
        interval = p.interval
        interval.loss_sum += loss_sum
        interval.tokens += n_tokens
        interval.seconds += seconds
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss_sum / n_tokens:.3f}",
            lr=f"{lr:.2e}",
            tok_s=f"{n_tokens / max(seconds, 1e-9):,.0f}",
            refresh=False,
        )
        if p.step % t.log_every:
            return
        tokens_per_s = interval.tokens / max(interval.seconds, 1e-9)
        row = LogRow(p.step, epoch, interval.loss_sum / interval.tokens, lr, tokens_per_s)
        p.steps.append(row)
        p.interval = Interval()
        self.observer.log_metrics(
            {"train_loss": row.loss, "lr": row.lr, "tokens_per_s": row.tokens_per_s}, p.step
        )
        if bar.disable:
            self.say(
                f"step {p.step} | epoch {epoch} | loss {row.loss:.4f} | lr {row.lr:.3e} | "
                f"{row.tokens_per_s:,.0f} tok/s | eta {self.eta()}"
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
        rngs = gather_rng(self.dist, self.device)
        improved = False
        if not (p.valid and p.valid[-1].step == p.step):  # not again at a step already validated
            improved = self.validate(epoch)
        early = t.patience and p.bad_validations >= t.patience
        p.stopped = limit or ("early_stopping" if early else None)
        p.train_seconds += time.perf_counter() - began
        if self.dist.main:
            with signals.deferred():
                self.state.save(improved, rngs)
                self.write_logs()

    # --- validation ---

    def validate(self, epoch: int) -> bool:
        """Score the val split on rank 0, share the result, update best/patience; -> improved."""
        with self.update.evaluated_weights():
            val_loss, val_bleu = self.dist.broadcast(self.val.evaluate() if self.dist.main else None)
        p, t = self.progress, self.params.train
        p.valid.append(Validation(p.step, epoch, val_loss, val_bleu))
        metric = val_bleu if t.early_stop_metric == "bleu" else -val_loss
        improved = math.isfinite(metric) and (p.best_metric is None or metric > p.best_metric)
        if improved:
            p.best_metric, p.best_step, p.bad_validations = metric, p.step, 0
        else:
            p.bad_validations += 1
        p.kept = ([*p.kept, p.step])[-t.keep_last :]
        metrics = {"val_loss": val_loss} | ({"val_bleu": val_bleu} if t.val_bleu else {})
        self.observer.log_metrics(metrics, p.step)
        best = "" if p.best_step is None else f" | best step {p.best_step}"
        bleu = f" | val_bleu {val_bleu:.2f}" if t.val_bleu else ""
        self.say(f"valid step {p.step} | epoch {epoch} | val_loss {val_loss:.4f}{bleu}{best}")
        return improved

    # --- outputs ---

    def write_logs(self) -> None:
        p, log_dir = self.progress, self.paths.log_dir
        write_lines(log_dir / "steps.tsv", ["\t".join(STEPS_HEADER)] + [_tsv(row) for row in p.steps])
        write_lines(log_dir / "valid.tsv", ["\t".join(VALID_HEADER)] + [_tsv(row) for row in p.valid])

    def finish(self) -> dict[str, Any]:
        """Write data/model, the logs and summary.json (rank 0), and hand the logs to the observer."""
        payload, averaged = self.state.final_payload()
        out = self.paths.out_dir
        with signals.deferred(), atomic_path(out) as tmp:
            tmp.mkdir()
            checkpoint.save(tmp / checkpoint.MODEL_FILE, payload)
            write_text(tmp / "params.yaml", yaml.safe_dump(self.params.to_dict(), sort_keys=False))
            for model_file in self.vocab.model_files():
                shutil.copy2(model_file, tmp / model_file.name)
            RunFile.of(self.run_info()).write(tmp / RUN_FILE)
            if self.parent is not None:
                write_json(tmp / lineage.PARENT_FILE, self.parent.to_dict())
        summary = self.summary(averaged)
        self.write_logs()
        write_json(self.paths.log_dir / "summary.json", summary)
        totals = {k: summary[k] for k in ("train_seconds", "tokens_per_s")}
        self.observer.log_metrics(totals, self.progress.step)
        self.observer.log_artifacts(self.paths.log_dir, "train")
        return summary

    def run_info(self) -> dict[str, str | None]:
        """The MLflow run for later stages: this session's, else the one the state recorded, else none."""
        info = self.observer.run_info()
        if info.get("run_id"):
            return info
        return self.progress.run or info

    def summary(self, averaged: int) -> dict[str, Any]:
        """summary.json: tokens_per_s counts update time only; train_seconds includes validation."""
        p = self.progress
        best = p.best_validation()
        device = str(self.device)
        if self.device.type == "cuda":
            device = f"cuda ({torch.cuda.get_device_name(self.device)})"
        return {
            "n_params": count_parameters(self.model),
            "train_seconds": round(p.train_seconds, 3),
            "tokens_per_s": round(p.tokens / p.update_seconds, 1) if p.update_seconds else 0.0,
            "best_step": p.best_step,
            "best_val_bleu": best.val_bleu if best else None,
            "best_val_loss": best.val_loss if best else None,
            "device": device,
            "precision": self.params.train.precision,
            "compiled": self.params.train.compile,
            "stopped": p.stopped,
            "steps": p.step,
            "epochs": p.epoch - 1 if p.position == 0 else p.epoch,
            "averaged": averaged,
            "skipped_updates": p.skipped,
            "world_size": self.dist.world_size,
            "pairs_drawn_per_epoch": self.epochs.sources.drawn_per_epoch(),
        }

    # --- MLflow ---

    def open_observer(self, tracking: bool) -> Observer:
        """Open the MLflow run on rank 0 (or take up the one a resumed state recorded); else Quiet."""
        if not (tracking and self.dist.main):
            return self.observer
        d, m = self.params.data, self.params.model
        label = os.environ.get("DVC_EXP_NAME") or time.strftime("%Y-%m-%d %H:%M:%S")
        tags = {
            "stage": "train",
            "precision": self.params.train.precision,
            "compiled": self.params.train.compile,
            "device": str(self.device),
            "world_size": self.dist.world_size,
            "n_params": count_parameters(self.model),  # a constant: a tag, not a metric series
        } | (self.parent.tags() if self.parent else {})
        tags |= lineage.teacher_tags(self.paths.clean_dir)  # a student's: trained on teachers' translations
        start = RunStart(
            params=self.params.to_dict(),
            run_name=f"{d.src_lang}-{d.tgt_lang} {m.arch} {label}",
            tags=tags,
            offline_dir=self.paths.ckpt_dir,
            resumed=self.progress.run,
            replaced=self.state.replaced_run,
        )
        self.observer = mlflow_run(start)
        self.progress.run = self.observer.run_info()
        return self.observer


def _tsv(row: tuple) -> str:
    return "\t".join("nan" if v is None else str(v) if isinstance(v, int) else f"{v:.6g}" for v in row)
