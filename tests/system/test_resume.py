"""Exact resume: a run interrupted anywhere and restarted ends bitwise equal to an uninterrupted one.

Interruptions: a real SIGKILL of the `python -m pipeline train` process (twice,
at different points), and in-process exceptions at chosen points (between
checkpoints, between writing ckpt_<step>.pt and last.pt, while writing the
model directory), in fp32 and bf16. Dropout is on, validations happen mid-epoch,
update_freq is 2 and val BLEU is computed, so every piece of state matters.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from pipeline import params as P
from pipeline.model import checkpoint
from pipeline.stages.bpe import copy_parent
from pipeline.stages.train import train
from pipeline.training import state as run_state
from pipeline.training.state import Paths
from pipeline.training.step import UpdateStep
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, make_text_corpus, tiny_raw
from tests.support.repo import REPO

pytestmark = pytest.mark.slow

SETTINGS = dict(
    max_epochs=100,
    max_steps=30,
    validate_every=4,
    update_freq=2,
    keep_last=3,
    average_last=2,
    val_bleu=True,
    early_stop_metric="loss",
    log_every=3,
)


class Interrupt(Exception):
    """Stands in for a crash at a chosen point."""


def run_paths(root: Path, corpus: Paths, clean: bool = False) -> Paths:
    """Separate outputs over a shared corpus (and its clean text, for subword sampling)."""
    outs = (root / "model", root / "checkpoints", root / "log")
    return Paths(corpus.bin_dir, corpus.bpe_dir, *outs, corpus.clean_dir if clean else None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Paths:
    return make_corpus(tmp_path_factory.mktemp("resume"), n_train=120, n_val=12)


def assert_same_run(a: Paths, b: Paths) -> None:
    """Bitwise the same final model and training state, and the same logs but for timings."""
    for name in ("model/model.pt", "checkpoints/last.pt"):
        wa = checkpoint.load(a.out_dir.parent / name)
        wb = checkpoint.load(b.out_dir.parent / name)
        assert wa["model"].keys() == wb["model"].keys()
        for key in wa["model"]:
            assert torch.equal(wa["model"][key], wb["model"][key]), f"{name}: {key} differs"
    state_a, state_b = (checkpoint.load(p.ckpt_dir / "last.pt") for p in (a, b))
    opt_a, opt_b = state_a["optimizer"]["state"], state_b["optimizer"]["state"]
    assert opt_a.keys() == opt_b.keys()
    for key in opt_a:
        assert all(torch.equal(opt_a[key][k], opt_b[key][k]) for k in opt_a[key])
    assert torch.equal(state_a["rng"][0]["torch"], state_b["rng"][0]["torch"])
    assert ("ema" in state_a) == ("ema" in state_b)
    if "ema" in state_a:  # train.ema_decay: the moving average goes on where it was
        assert state_a["ema"]["n"] == state_b["ema"]["n"]
        shadow_a, shadow_b = state_a["ema"]["shadow"], state_b["ema"]["shadow"]
        assert all(torch.equal(shadow_a[k], shadow_b[k]) for k in shadow_a)
    assert read_tsv(a.log_dir / "valid.tsv") == read_tsv(b.log_dir / "valid.tsv")
    steps_a, steps_b = (read_tsv(p.log_dir / "steps.tsv") for p in (a, b))
    assert [r[:4] for r in steps_a] == [r[:4] for r in steps_b]  # all but tokens_per_s
    assert sorted(p.name for p in a.ckpt_dir.iterdir()) == sorted(p.name for p in b.ckpt_dir.iterdir())


def interrupt_at(monkeypatch, target: object, name: str, when) -> None:
    """Raise Interrupt instead of calling target.name on the call for which when(n, *args) holds."""
    real = getattr(target, name)
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if when(calls["n"], *args):
            raise Interrupt(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)


@pytest.mark.parametrize(
    "precision, ema_decay, compiled",
    [("fp32", 0.0, False), ("bf16", 0.0, False), ("fp32", 0.9, False), ("auto", 0.0, True)],
)
def test_in_process_interruptions_change_nothing(
    precision, ema_decay, compiled, corpus, tmp_path, monkeypatch
):
    """In fp32 and bf16, with a moving average of the weights, and under train.compile (whose
    kernels are built again after each restart) in the precision auto picks: bf16 where the CPU
    multiplies it natively, as the pipeline compiles by default; fp32 on an AVX2-only CPU, where
    compiled bf16 (its emulated products) differs between two uninterrupted runs
    (docs/exact-resume.md)."""
    raw = tiny_raw(precision=precision, ema_decay=ema_decay, compile=compiled, **SETTINGS)
    params = P.from_dict(raw)
    uninterrupted = run_paths(tmp_path / "a", corpus)
    train(params, uninterrupted, tracking=False)

    b = run_paths(tmp_path / "b", corpus)
    crashes = [
        # update 7 of a session: between the checkpoints at steps 4 and 8
        (UpdateStep, "update", lambda n, *a: n == 7),
        # after ckpt_16.pt (and best.pt) were written, before last.pt
        (
            run_state,
            "save_file",
            lambda n, path, *a: (
                path.name == "last.pt" and "ckpt_16.pt" in {p.name for p in path.parent.iterdir()}
            ),
        ),
        # update 2 right after a resume, before any new checkpoint
        (UpdateStep, "update", lambda n, *a: n == 2),
        # after training ended, while writing data/model
        (run_state, "average", lambda n, *a: True),
    ]
    if compiled:  # what compile adds: its kernels built again after a crash mid-update and a resume
        crashes = [crashes[0], crashes[2]]
    for target, name, when in crashes:
        with monkeypatch.context() as patch:
            interrupt_at(patch, target, name, when)
            try:
                train(params, b, tracking=False)
            except Interrupt:
                pass
            else:
                raise AssertionError(f"the interruption at {name} never happened")
    if not compiled:
        assert checkpoint.load(b.ckpt_dir / "last.pt")["progress"]["stopped"] == "max_steps"
    assert not b.out_dir.exists()
    train(params, b, tracking=False)
    assert_same_run(uninterrupted, b)


def test_a_child_resumes_from_its_own_state_to_the_same_weights(corpus, tmp_path, monkeypatch):
    parent = run_paths(tmp_path / "parent", corpus)
    train(P.from_dict(tiny_raw(max_steps=12, validate_every=4)), parent, tracking=False)
    raw = tiny_raw(**SETTINGS)
    raw["train"]["init_from"] = str(parent.out_dir)
    params = P.from_dict(raw)
    copy_parent(params, tmp_path / "bpe")
    uninterrupted = dataclasses.replace(run_paths(tmp_path / "a", corpus), bpe_dir=tmp_path / "bpe")
    train(params, uninterrupted, tracking=False)

    b = dataclasses.replace(run_paths(tmp_path / "b", corpus), bpe_dir=tmp_path / "bpe")
    for when in (lambda n, *a: n == 7, lambda n, *a: n == 6):  # after the checkpoint at step 4, then at 8
        with monkeypatch.context() as patch:
            interrupt_at(patch, UpdateStep, "update", when)
            with pytest.raises(Interrupt):
                train(params, b, tracking=False)
    assert checkpoint.load(b.ckpt_dir / "last.pt")["progress"]["step"] == 8
    train(params, b, tracking=False)
    assert_same_run(uninterrupted, b)
    final = checkpoint.load(b.out_dir / "model.pt")["model"]
    assert not torch.equal(
        final["out_weight"], checkpoint.load(parent.out_dir / "model.pt")["model"]["out_weight"]
    )


def train_command(params_file: Path, paths: Paths) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipeline",
        "train",
        "--params",
        str(params_file),
        "--bin",
        str(paths.bin_dir),
        "--bpe",
        str(paths.bpe_dir),
        "--out",
        str(paths.out_dir),
        "--checkpoints",
        str(paths.ckpt_dir),
        "--log",
        str(paths.log_dir),
        "--no-tracking",
        *(["--clean", str(paths.clean_dir)] if paths.clean_dir else []),
    ]


def kill_when(params_file: Path, paths: Paths, ready, log: Path, timeout: float = 120.0) -> None:
    """Start training, and SIGKILL it as soon as ready() holds (polled every few ms)."""
    with open(log, "w") as stderr:  # a file, not a pipe, that nobody must drain
        proc = subprocess.Popen(
            train_command(params_file, paths), cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr
        )
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, f"training ended before it was killed:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "training never reached the point to kill it"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkilled_run_resumes_to_bitwise_the_same_weights(corpus, tmp_path):
    # More updates than the in-process test, so that a kill lands while training is under way.
    raw = tiny_raw(**{**SETTINGS, "max_steps": 80, "validate_every": 5})
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    uninterrupted = run_paths(tmp_path / "a", corpus)
    train(P.from_dict(raw), uninterrupted, tracking=False)

    b = run_paths(tmp_path / "b", corpus)
    # Kill 1: as soon as the first training state exists.
    kill_when(params_file, b, lambda: (b.ckpt_dir / "last.pt").exists(), tmp_path / "kill1.log")
    # Kill 2, after a resume: as soon as ckpt_40.pt exists, i.e. likely before last.pt follows it.
    kill_when(params_file, b, lambda: (b.ckpt_dir / "ckpt_40.pt").exists(), tmp_path / "kill2.log")
    assert "resuming from step" in (tmp_path / "kill2.log").read_text()
    state = checkpoint.load(b.ckpt_dir / "last.pt")["progress"]
    assert state["stopped"] is None and state["step"] < 80
    command = train_command(params_file, b)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from step" in done.stderr
    assert_same_run(uninterrupted, b)


# --- with subword sampling: each epoch segments the clean text afresh ------------------------


SAMPLED = {"bpe": {"subword_sampling": "bpe_dropout", "subword_alpha": 0.2}}
SAMPLED["unigram"] = {"subword_sampling": "unigram", "subword_alpha": 0.2}


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def text_corpus(request, tmp_path_factory) -> tuple[Paths, dict]:
    """A text corpus with a model of each type, and the train settings that sample it."""
    root = tmp_path_factory.mktemp(f"sampling-{request.param}")
    return make_text_corpus(root, model_type=request.param, n_train=60, n_val=8), SAMPLED[request.param]


def with_model_type(raw: dict, sampled: dict) -> dict:
    """params whose bpe.model_type fits the sampling (the corpus's model is of that type)."""
    raw["bpe"]["model_type"] = "unigram" if sampled["subword_sampling"] == "unigram" else "bpe"
    return raw


def test_sigkilled_run_with_subword_sampling_resumes_mid_epoch_to_the_same_weights(text_corpus, tmp_path):
    text_corpus, sampled = text_corpus
    raw = with_model_type(tiny_raw(**{**SETTINGS, "max_steps": 40, "validate_every": 3, **sampled}), sampled)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    uninterrupted = run_paths(tmp_path / "a", text_corpus, clean=True)
    train(P.from_dict(raw), uninterrupted, tracking=False)
    steps = read_tsv(uninterrupted.log_dir / "steps.tsv")
    assert len({row[1] for row in steps[1:]}) >= 3  # several epochs, each with its own segmentation

    b = run_paths(tmp_path / "b", text_corpus, clean=True)
    kill_when(params_file, b, lambda: (b.ckpt_dir / "ckpt_6.pt").exists(), tmp_path / "kill.log")
    state = checkpoint.load(b.ckpt_dir / "last.pt")["progress"]
    assert state["stopped"] is None and state["position"] > 0  # killed mid-epoch
    done = subprocess.run(
        train_command(params_file, b), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from step" in done.stderr
    assert_same_run(uninterrupted, b)


def test_sampling_changes_what_is_learned_so_the_resume_test_above_can_fail(text_corpus, tmp_path):
    """Without this, a sampler that did nothing would pass the resume test too."""
    text_corpus, sampled = text_corpus
    runs = {}
    for name, extra in (("off", {}), ("on", sampled)):
        paths = run_paths(tmp_path / name, text_corpus, clean=True)
        raw = with_model_type(tiny_raw(**{**SETTINGS, "max_steps": 12, **extra}), sampled)
        train(P.from_dict(raw), paths, tracking=False)
        runs[name] = checkpoint.load(paths.out_dir / "model.pt")["model"]
    assert any(not torch.equal(runs["off"][k], runs["on"][k]) for k in runs["off"])
