"""torchrun --nproc_per_node 1 on this machine's device: NCCL on a GPU, gloo on a CPU (so CI runs the
same commands the GPU check does). The train stage starts no process group for one process, so the
DDP probe (tests/gpu/ddp_probe.py) is what runs the backend's all-reduce; then `python -m pipeline
train` itself for a few updates under torchrun."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from bench.common import TINY
from pipeline import params as P
from tests.gpu.corpus import write_small_run
from tests.support.repo import REPO

ON_GPU = torch.cuda.is_available()
STEPS = 20 if ON_GPU else 2
TIMEOUT_S = 90


def torchrun(*args: str, log: Path) -> int:
    """`torchrun --standalone --nproc_per_node 1 ARGS`, its output in `log`; -> the exit code."""
    script = Path(sys.executable).parent / "torchrun"
    launcher = [str(script)] if script.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    env = dict(os.environ, OMP_NUM_THREADS="1" if not ON_GPU else os.environ.get("OMP_NUM_THREADS", "4"))
    with open(log, "w") as out:
        command = [*launcher, "--standalone", "--nproc_per_node", "1", *args]
        done = subprocess.run(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=TIMEOUT_S
        )
    return done.returncode


def test_ddp_updates_and_an_all_reduce_under_torchrun(tmp_path, record_property):
    report, log = tmp_path / "probe.json", tmp_path / "probe.log"
    backend = "nccl" if ON_GPU else "gloo"
    args = ["-m", "tests.gpu.ddp_probe", "--backend", backend, "--steps", str(STEPS), "--out", str(report)]
    code = torchrun(*args, *([] if ON_GPU else ["--tiny"]), log=log)
    assert code == 0, log.read_text()[-2000:]
    seen = json.loads(report.read_text())
    record_property("ddp_probe", json.dumps(seen))
    assert seen["backend"] == backend and seen["world_size"] == 1
    assert seen["finite"] and seen["all_reduce_ok"] and len(seen["losses"]) == STEPS


def test_the_train_stage_under_torchrun(tmp_path, record_property):
    bin_dir, bpe_dir = write_small_run(tmp_path / "data")
    params = P.load(REPO / "params.yaml")
    raw = dataclasses.replace(params, model=params.model if ON_GPU else TINY.of(params.model)).to_dict()
    raw["bpe"]["vocab_size"] = 64
    raw["train"].update(
        device="cuda" if ON_GPU else "cpu",
        precision="bf16",
        compile=False,
        max_tokens=2048 if ON_GPU else 256,
        max_steps=STEPS,
        max_epochs=100,
        validate_every=0,
        val_bleu=True,  # the end's validation decodes greedily on the device
        early_stop_metric="loss",
        patience=0,
        keep_last=1,
        average_last=0,
        log_every=max(STEPS // 2, 1),
        threads=0 if ON_GPU else 1,
    )
    P.from_dict(raw)  # a typo fails here, not in the subprocess
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = {"out": tmp_path / "model", "checkpoints": tmp_path / "checkpoints", "log": tmp_path / "log"}
    # "--" ends torchrun's own options: without it, its argparse takes train's --log for a prefix of
    # its --log-dir and stops ("ambiguous option").
    args = ["-m", "pipeline", "--", "train", "--params", str(params_file), "--bin", str(bin_dir)]
    args += ["--bpe", str(bpe_dir), "--no-tracking", *(x for k, v in out.items() for x in (f"--{k}", str(v)))]
    log = tmp_path / "train.log"
    assert torchrun(*args, log=log) == 0, log.read_text()[-2000:]
    summary = json.loads((out["log"] / "summary.json").read_text())
    keys = ("steps", "device", "precision", "world_size", "tokens_per_s", "best_val_loss")
    record_property("summary", json.dumps({k: summary.get(k) for k in keys}))
    assert summary["steps"] == STEPS and summary["world_size"] == 1
    assert str(summary["device"]).startswith("cuda" if ON_GPU else "cpu")
    assert (out["out"] / "model.pt").is_file()
