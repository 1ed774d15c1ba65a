"""A stopped training leaves its MLflow run with the status that says what happened (issue 30).

Real `python -m pipeline train` processes against a SQLite store: SIGINT and SIGTERM end the run as
KILLED once the last checkpoint is whole, with exit 130 and 143; a SIGKILLed run is taken up again as
the same run when training resumes, and marked KILLED when a new training starts afresh in its place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline.model import checkpoint
from pipeline.reporting.runs import mlflow_table
from pipeline.training.state import Paths
from tests.support.models import make_corpus, tiny_raw
from tests.support.repo import REPO

pytestmark = pytest.mark.slow

SETTINGS = dict(max_epochs=1000, max_steps=400, validate_every=5, log_every=1, val_bleu=False)
SETTINGS |= dict(early_stop_metric="loss", patience=0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Paths:
    return make_corpus(tmp_path_factory.mktemp("status"), n_train=120, n_val=12)


def setup(tmp_path: Path, corpus: Paths, **train) -> tuple[Path, Paths, dict[str, str]]:
    tmp_path.mkdir(exist_ok=True)
    raw = tiny_raw(**(SETTINGS | train))
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    paths = Paths(corpus.bin_dir, corpus.bpe_dir, tmp_path / "model", tmp_path / "ckpt", tmp_path / "log")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return params_file, paths, env


def command(params_file: Path, paths: Paths) -> list[str]:
    return [
        *(sys.executable, "-m", "pipeline", "train", "--params", str(params_file)),
        *("--bin", str(paths.bin_dir), "--bpe", str(paths.bpe_dir), "--out", str(paths.out_dir)),
        *("--checkpoints", str(paths.ckpt_dir), "--log", str(paths.log_dir), "--on-change", "restart"),
    ]


def stop_once_saved(params_file: Path, paths: Paths, env: dict[str, str], sig: int, log: Path) -> int:
    """Start training, send `sig` once it has saved a training state; -> the exit code."""
    last = paths.ckpt_dir / "last.pt"
    before = last.stat().st_mtime_ns if last.exists() else None
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            command(params_file, paths), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    deadline = time.monotonic() + 180
    try:
        while not (last.exists() and last.stat().st_mtime_ns != before):
            assert proc.poll() is None, f"training ended before the signal:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "training never saved a state"
            time.sleep(0.005)
    finally:
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
    return code


def runs(env: dict[str, str]) -> dict[str, str]:
    """run id -> status (lower case), as the experiments table shows it."""
    os.environ["MLFLOW_TRACKING_URI"] = env["MLFLOW_TRACKING_URI"]
    try:
        frame = mlflow_table("nmt")
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    return dict(zip(frame["id"], frame["status"]))


def run_id(paths: Paths) -> str:
    return checkpoint.load(paths.ckpt_dir / "last.pt")["progress"]["run"]["run_id"]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_sigint_end_the_run_as_killed_and_resume_it(corpus, tmp_path, sig, code):
    params_file, paths, env = setup(tmp_path, corpus, max_steps=60)
    log = tmp_path / "stop.log"
    assert stop_once_saved(params_file, paths, env, sig, log) == code, log.read_text()[-2000:]
    stopped = log.read_text()
    assert "Traceback" not in stopped and "rerun the same command to resume" in stopped
    first = run_id(paths)
    checkpoint.load(paths.ckpt_dir / "last.pt")  # whole: the signal waited for the save
    assert runs(env) == {first: "killed"}

    done = subprocess.run(command(params_file, paths), cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from step" in done.stderr
    assert runs(env) == {first: "finished"}  # the same run, taken up again


def test_a_sigkilled_run_is_resumed_as_itself_or_marked_killed_when_replaced(corpus, tmp_path):
    params_file, paths, env = setup(tmp_path, corpus, max_steps=60)
    assert stop_once_saved(params_file, paths, env, signal.SIGKILL, tmp_path / "k1.log") == -signal.SIGKILL
    first = run_id(paths)
    assert runs(env) == {first: "running"}  # nothing could say otherwise: the process had no last word

    assert stop_once_saved(params_file, paths, env, signal.SIGKILL, tmp_path / "k2.log") == -signal.SIGKILL
    assert "resuming from step" in (tmp_path / "k2.log").read_text()
    assert run_id(paths) == first and runs(env) == {first: "running"}  # resumed as the same run

    other, _, _ = setup(tmp_path / "lr", corpus, max_steps=8, lr=5e-4)  # other settings: a new training
    done = subprocess.run(command(other, paths), cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting afresh" in done.stderr
    second = run_id(paths)
    assert second != first
    assert runs(env) == {first: "killed", second: "finished"}


def test_the_experiments_command_filters_runs_by_status(corpus, tmp_path):
    params_file, paths, env = setup(tmp_path, corpus, max_steps=60)
    stop_once_saved(params_file, paths, env, signal.SIGTERM, tmp_path / "stop.log")
    base = [sys.executable, "-m", "pipeline", "experiments", "--params", str(params_file)]
    options = dict(cwd=tmp_path, env=env, capture_output=True, text=True)
    shown = subprocess.run(base, **options)
    assert shown.returncode == 0, shown.stderr
    assert "| killed |" in shown.stdout
    hidden = subprocess.run([*base, "--status", "finished"], **options)
    assert hidden.returncode != 0 and "no finished runs" in hidden.stderr and "Traceback" not in hidden.stderr
    killed = subprocess.run([*base, "--status", "killed"], **options)
    assert killed.returncode == 0 and "| killed |" in killed.stdout
