"""Exact resume on the GPU: a `python -m pipeline train` run SIGKILLed mid-way and started again
ends as a run never interrupted: the same weights, optimizer and grad-scaler state, CUDA RNG state
and validation log.

Deterministic settings (both runs): torch.use_deterministic_algorithms(True), and
CUBLAS_WORKSPACE_CONFIG=:4096:8, which cuBLAS needs for reproducible results ("Results
reproducibility" in NVIDIA's cuBLAS documentation; torch refuses nondeterministic cuBLAS use without
it). Under them resume must be bitwise. Under torch's defaults (what a user runs), kernels that
accumulate with atomics (the memory-efficient attention backward, scatter-adds) may sum in another
order each run, so the runs are compared within DEFAULT_ATOL and the difference is recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from pipeline.model import checkpoint
from pipeline.training.state import Paths
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, tiny_raw
from tests.support.repo import REPO

pytestmark = pytest.mark.cuda

DETERMINISTIC_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "GPU_TEST_DETERMINISTIC": "1"}
DEFAULT_ATOL = 5e-2  # weights after 100 updates at lr 5e-3, torch's default (nondeterministic) kernels
SETTINGS = dict(
    device="cuda",
    max_epochs=100,
    max_steps=100,
    validate_every=5,
    update_freq=2,
    keep_last=2,
    val_bleu=True,
    early_stop_metric="loss",
    log_every=5,
)
# `python -m pipeline ...`, after the deterministic settings when the environment asks for them.
RUN = r"""
import os, sys
import torch
if os.environ.get("GPU_TEST_DETERMINISTIC") == "1":
    torch.use_deterministic_algorithms(True)
from pipeline.cli import cli
cli.main(args=sys.argv[1:], prog_name="pipeline")
"""


def command(params_file: Path, paths: Paths) -> list[str]:
    args = ["train", "--params", str(params_file), "--bin", str(paths.bin_dir), "--bpe", str(paths.bpe_dir)]
    args += ["--out", str(paths.out_dir), "--checkpoints", str(paths.ckpt_dir), "--log", str(paths.log_dir)]
    return [sys.executable, "-c", RUN, *args, "--no-tracking"]


def train_to_the_end(params_file: Path, paths: Paths, env: dict[str, str]) -> str:
    done = subprocess.run(
        command(params_file, paths), cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def kill_after_first_checkpoint(params_file: Path, paths: Paths, env: dict[str, str], log: Path) -> None:
    """Start training and SIGKILL it as soon as last.pt exists (polled every 2 ms)."""
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            command(params_file, paths), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    deadline = time.monotonic() + 240
    try:
        while not (paths.ckpt_dir / "last.pt").exists():
            assert proc.poll() is None, f"training ended before it was killed:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "training never wrote its first checkpoint"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].is_floating_point())


@pytest.mark.parametrize("precision,deterministic", [("fp16", True), ("bf16", False)])
def test_a_killed_gpu_run_resumes_to_the_same_weights(precision, deterministic, tmp_path, record_property):
    corpus = make_corpus(tmp_path / "corpus", n_train=120, n_val=12)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_raw(precision=precision, **SETTINGS)), encoding="utf-8")
    env = dict(os.environ, **(DETERMINISTIC_ENV if deterministic else {}))
    runs = {
        name: Paths(
            corpus.bin_dir,
            corpus.bpe_dir,
            tmp_path / name / "model",
            tmp_path / name / "ckpt",
            tmp_path / name / "log",
        )
        for name in ("whole", "resumed")
    }
    train_to_the_end(params_file, runs["whole"], env)
    resumed = runs["resumed"]
    kill_after_first_checkpoint(params_file, resumed, env, tmp_path / "killed.log")
    assert checkpoint.load(resumed.ckpt_dir / "last.pt")["progress"]["step"] < SETTINGS["max_steps"]
    assert "resuming from step" in train_to_the_end(params_file, resumed, env)

    whole, again = (checkpoint.load(p.ckpt_dir / "last.pt") for p in runs.values())
    assert whole["progress"]["step"] == again["progress"]["step"] == SETTINGS["max_steps"]
    assert "cuda" in whole["rng"][0], "the CUDA RNG state is saved"
    models = [checkpoint.load(p.out_dir / "model.pt")["model"] for p in runs.values()]
    weights_diff = max_difference(*models)
    record_property("max_abs_weight_diff", weights_diff)
    record_property("bitwise", weights_diff == 0.0)
    if deterministic:
        assert weights_diff == 0.0
        assert max_difference(whole["model"], again["model"]) == 0.0
        for key, state in whole["optimizer"]["state"].items():
            assert all(torch.equal(state[k], again["optimizer"]["state"][key][k]) for k in state)
        assert whole["scaler"] == again["scaler"]
        assert torch.equal(whole["rng"][0]["cuda"], again["rng"][0]["cuda"])
        assert read_tsv(runs["whole"].log_dir / "valid.tsv") == read_tsv(resumed.log_dir / "valid.tsv")
    else:
        assert weights_diff < DEFAULT_ATOL
