"""bench/gpu_check.sh: its CPU rehearsal (--dry-run) runs every step of the GPU run (the CUDA tests,
then the training and decoding benchmarks) and writes only under --out; without a GPU the real run
refuses at once and writes nothing; a bad call says what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from tests.support.repo import REPO

pytestmark = pytest.mark.slow

CUDA_MODULES = {f"tests.gpu.test_cuda_{m}" for m in ("attention", "training", "resume", "decoding", "data")}


def run_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    command = ["bash", "bench/gpu_check.sh", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def reports_state() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (REPO / "reports").iterdir()}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("gpu-check") / "out"
    before = reports_state()
    done = run_check("--dry-run", "--out", str(out), timeout=400)
    assert reports_state() == before, "the dry run wrote to reports/"
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done, out


def test_the_dry_run_runs_every_step_and_times_it(dry_run):
    done, _ = dry_run
    for step in ("tests", "train", "decode"):
        assert f"[gpu_check] {step}: done in " in done.stdout, step
    # serve needs a trained model and its test source, which the rehearsal does not use
    assert "[gpu_check] serve: skipped" in done.stdout and "every step passed" in done.stdout


def test_the_dry_run_skips_every_cuda_test_for_the_missing_gpu_and_runs_torchrun(dry_run):
    _, out = dry_run
    cases = {
        f"{c.get('classname')}::{c.get('name')}": c
        for c in ET.parse(out / "gpu-tests.xml").getroot().iter("testcase")
    }
    cuda = [c for name, c in cases.items() if name.split("::")[0] in CUDA_MODULES]
    assert {name.split("::")[0] for name in cases} >= CUDA_MODULES | {"tests.gpu.test_torchrun"}
    if not torch.cuda.is_available():
        assert cuda and all(c.find("skipped") is not None for c in cuda)
    torchrun = [c for name, c in cases.items() if name.startswith("tests.gpu.test_torchrun")]
    assert len(torchrun) == 2 and all(
        c.find("failure") is None and c.find("skipped") is None for c in torchrun
    )


def test_the_dry_run_writes_the_benchmarks_rows_and_sections_under_out(dry_run):
    _, out = dry_run
    rows = json.loads((out / "gpu.json").read_text())
    tasks = {r["task"] for r in rows}
    assert any(t.startswith("train_synthetic") for t in tasks) and {"decode_greedy", "decode_beam5"} <= tasks
    assert all(r["smoke"] is True for r in rows)
    md = (out / "gpu.md").read_text()
    assert "## Training speed (CPU) — SMOKE RUN" in md and "## Decoding speed (CPU) — SMOKE RUN" in md


def test_without_a_gpu_the_real_run_refuses_at_once_and_writes_nothing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    before = reports_state()
    done = run_check("--out", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2
    assert "no CUDA GPU here" in done.stderr and "--dry-run" in done.stderr
    assert "[gpu_check]" not in done.stdout  # no step started
    assert not (tmp_path / "out").exists() and reports_state() == before
    done = run_check(timeout=120)  # the default --out, reports/
    assert done.returncode == 2 and reports_state() == before


def test_the_dry_run_never_writes_to_reports():
    for out in ("reports", "reports/gpu", str(REPO / "reports")):
        done = run_check("--dry-run", "--out", out, timeout=120)
        assert done.returncode == 2 and "never to reports/" in done.stderr, out


def test_out_without_a_folder_is_a_bad_call():
    done = run_check("--dry-run", "--out", timeout=60)
    assert done.returncode == 2 and "--out needs a folder" in done.stderr


def test_an_unknown_argument_is_named(tmp_path):
    done = run_check("--dry-run", "--outt", str(tmp_path), timeout=60)
    assert done.returncode == 2 and "unknown argument '--outt'" in done.stderr
