"""The state of a training run, and the files that hold it: last.pt and the model checkpoints.

`RunState` is what last.pt saves and a resumed run loads: the update step's
tensors, `Progress` (position, counters, log rows), every rank's RNG, and the
fingerprints of the params, data and code that decide whether a saved run may
go on here. Resume is exact; how, and what may change in between:
docs/exact-resume.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import torch

from pipeline import fingerprint
from pipeline import params as P
from pipeline.data.batching import shard_prefixes
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.training.distributed import Dist
from pipeline.training.step import UpdateStep

# 2: Progress.interval is a dict of named fields (it was a list read by position).
STATE_FORMAT = "nmt-pipeline/train-state/2"
LAST, BEST = "last.pt", "best.pt"
# Settings a resumed run may change: they alter no weight (skip_bad_batches
# only acts where the saved run would have stopped, which is how one recovers).
MAY_CHANGE = {"train.log_every", "train.threads", "train.skip_bad_batches"}


@dataclass(frozen=True)
class Paths:
    bin_dir: Path
    bpe_dir: Path
    out_dir: Path
    ckpt_dir: Path
    log_dir: Path
    clean_dir: Path | None = None  # the clean text, which train.subword_sampling segments each epoch


# --- progress -------------------------------------------------------------------------


@dataclass
class Interval:
    """What the updates since the last steps.tsv row add up to."""

    loss_sum: float = 0.0  # label-smoothed loss, summed over target tokens
    tokens: int = 0  # target tokens, all ranks
    seconds: float = 0.0  # update time


class LogRow(NamedTuple):
    """A steps.tsv row: the loss per target token and tokens/s over the interval it closes."""

    step: int
    epoch: int
    loss: float
    lr: float
    tokens_per_s: float


class Validation(NamedTuple):
    """A valid.tsv row; val_bleu is None without train.val_bleu."""

    step: int
    epoch: int
    val_loss: float
    val_bleu: float | None


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
    interval: Interval = field(default_factory=Interval)
    steps: list[LogRow] = field(default_factory=list)
    valid: list[Validation] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # steps whose ckpt_<step>.pt is kept
    stopped: str | None = None  # max_epochs | max_steps | early_stopping once done
    run: dict | None = None  # the MLflow run: {"run_id", "tracking_uri"}

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (last.pt is read with weights_only=True): the rows as lists."""
        state = dataclasses.asdict(self)
        state["steps"] = [list(row) for row in self.steps]
        state["valid"] = [list(row) for row in self.valid]
        return state

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Progress:
        named = {
            "interval": Interval(**state["interval"]),
            "steps": [LogRow(*row) for row in state["steps"]],
            "valid": [Validation(*row) for row in state["valid"]],
        }
        return cls(**{**state, **named})

    def best_validation(self) -> Validation | None:
        return next((row for row in self.valid if row.step == self.best_step), None)


# --- RNG ------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every CUDA device too


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every generator training may draw from, as plain values and tensors."""
    np_state = cast(tuple, np.random.get_state())  # the legacy tuple form, as numpy returns by default
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


def gather_rng(dist: Dist, device: torch.device) -> list[dict[str, Any]]:
    """Every rank's RNG state (each draws its own dropout masks), for rank 0 to save."""
    return dist.all_gather(rng_state(device))


# --- fingerprints ---------------------------------------------------------------------


def code_fingerprint() -> dict[str, str]:
    """sha256 of every source file the train stage runs, by path in the package: a saved run
    resumes only under the code that wrote it (dvc.yaml re-runs the stage when any of them changes)."""
    return fingerprint.fingerprint("pipeline.stages.train")


def data_fingerprint(
    bin_dir: Path, vocab: Vocab, text: Sequence[Path] = (), parent: str | None = None
) -> str:
    """sha256 of the sentence offsets, the subword models, any `text` sampled and the parent's
    weights (their sha256, with train.init_from): changes with the data a run starts from."""
    digest = hashlib.sha256()
    for split, side in itertools.product(("train", "val"), ("src", "tgt")):
        for prefix in shard_prefixes(bin_dir, split, side):
            digest.update(Path(f"{prefix}.idx").read_bytes())
    for path in [*vocab.model_files(), *text]:
        digest.update(path.read_bytes())
    if parent is not None:
        digest.update(parent.encode())
    return digest.hexdigest()


# --- the run state --------------------------------------------------------------------


class RunState:
    """The update step's tensors, the progress and the fingerprints; saved to and resumed from last.pt."""

    def __init__(
        self,
        params: P.Params,
        paths: Paths,
        dist: Dist,
        update: UpdateStep,
        vocab: Vocab,
        text: Sequence[Path] = (),
        parent: str | None = None,
    ):
        """`text`: the clean text subword sampling segments, if it is on; `parent`: the sha256 of
        train.init_from's weights (both part of the data fingerprint)."""
        self.params, self.paths, self.dist, self.update, self.vocab = params, paths, dist, update, vocab
        self.data = data_fingerprint(paths.bin_dir, vocab, text, parent)
        self.code = code_fingerprint()
        self.progress = Progress()
        self.replaced_run: dict[str, str | None] | None = None  # the MLflow run of a state resume deleted

    def to_dict(self, rngs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "params": self.params.to_dict(),
            "world_size": self.dist.world_size,
            "data": self.data,
            "code": self.code,
            **self.update.state_dict(),
            "rng": rngs,
            "progress": self.progress.to_dict(),
        }

    def save(self, improved: bool, rngs: list[dict[str, Any]]) -> None:
        """ckpt_<step>.pt, best.pt if improved, then last.pt: a crash between them redoes the same.
        The first two hold the weights validation scored (the moving average with train.ema_decay)."""
        ckpt_dir, p = self.paths.ckpt_dir, self.progress
        with self.update.evaluated_weights():  # the moving average, with train.ema_decay
            payload = checkpoint.model_payload(
                self.update.model, self.params, self.vocab.src_size, self.vocab.tgt_size, p.step
            )
            save_file(ckpt_dir / f"ckpt_{p.step}.pt", payload, ckpt_dir)
            if improved:
                save_file(ckpt_dir / BEST, payload, ckpt_dir)
        save_file(ckpt_dir / LAST, self.to_dict(rngs), ckpt_dir)
        for path in ckpt_dir.glob("ckpt_*.pt"):
            if path.stem.removeprefix("ckpt_") not in {str(s) for s in p.kept}:
                path.unlink(missing_ok=True)

    def resume(self, on_change: str, say: Callable[[str], None]) -> None:
        """Continue from last.pt if there is one (refusing, or restarting, if it is another run's)."""
        path = self.paths.ckpt_dir / LAST
        if not path.is_file():
            return
        saved = checkpoint.load(path, map_location=self.update.device)
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
            say(f"train: {what}; deleting {self.paths.ckpt_dir} and starting afresh")
            self.replaced_run = saved["progress"].get("run")
            if self.dist.main:
                shutil.rmtree(self.paths.ckpt_dir)
            return
        self.load(saved, path)
        p = self.progress
        state = "finished; rebuilding its outputs" if p.stopped else f"epoch {p.epoch}, batch {p.position}"
        say(f"train: resuming from step {p.step} ({state})")

    def changes_from(self, saved: dict[str, Any]) -> list[str]:
        """What differs between a saved run and this one: params, data, code, number of processes."""
        old, new = _weight_settings(saved["params"]), _weight_settings(self.params.to_dict())
        changes = [
            f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(set(old) | set(new))
            if k not in MAY_CHANGE and old.get(k) != new.get(k)
        ]
        if saved["data"] != self.data:
            changes.append(f"the data in {self.paths.bin_dir} or {self.paths.bpe_dir} changed")
        old_code = saved.get("code", {})
        edited = sorted(f for f in set(old_code) | set(self.code) if old_code.get(f) != self.code.get(f))
        if edited:
            names = ", ".join(f"pipeline/{f}" for f in edited[:3]) + (", ..." if len(edited) > 3 else "")
            changes.append(f"the training code changed ({names})")
        if saved["world_size"] != self.dist.world_size:
            changes.append(f"{saved['world_size']} processes -> {self.dist.world_size}")
        return changes

    def load(self, saved: dict[str, Any], path: Path) -> None:
        self.update.load_state_dict(saved, path)
        self.progress = Progress.from_dict(saved["progress"])
        set_rng_state(saved["rng"][self.dist.rank], self.update.device)

    def last_good(self) -> str:
        """Where a failed run can resume from, for its error message."""
        path = self.paths.ckpt_dir / LAST
        if not path.is_file():
            return "no checkpoint was written yet"
        step = checkpoint.load(path)["progress"]["step"]  # raises if it is not whole
        return f"the last checkpoint, {path} (update {step}), is intact"

    def final_payload(self) -> tuple[dict[str, Any], int]:
        """The best checkpoint's payload, or the mean of the last average_last; -> (payload, k averaged)."""
        p, k, ckpt_dir = self.progress, self.params.train.average_last, self.paths.ckpt_dir
        if k > 0:
            steps = p.kept[-k:]
            return average([load_payload(ckpt_dir / f"ckpt_{s}.pt", s) for s in steps]), len(steps)
        if p.best_step is None:  # no finite validation metric ever: the last model it is
            return load_payload(ckpt_dir / f"ckpt_{p.kept[-1]}.pt", p.kept[-1]), 0
        return load_payload(ckpt_dir / BEST, p.best_step), 0


def _weight_settings(params: dict[str, Any]) -> dict[str, Any]:
    """The model.* and train.* settings, flat: what a resumed run must share with the saved one."""
    return {k: v for k, v in P.flatten(params).items() if k.split(".")[0] in ("model", "train")}


# --- checkpoint files -----------------------------------------------------------------


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
