"""Data parallel: 2 CPU processes (gloo) take the same steps as 1 process on the combined batches.

Two ranks are started as torchrun would start them (WORLD_SIZE, RANK,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each running `python -m pipeline train`
under an audit hook that records every file it creates, writes, renames or
deletes under the test's directory, so the test sees that only rank 0 wrote.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pipeline import params as P
from pipeline.data.batching import ParallelData, token_batches
from pipeline.model import checkpoint
from pipeline.stages.train import train
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, reshard, tiny_raw
from tests.support.repo import REPO

pytestmark = pytest.mark.slow

STEPS = 6

# Runs the train command with an audit hook; argv: root to watch, record file, then the command's args.
RANK_SCRIPT = r"""
import json, os, sys
root, record = sys.argv[1], sys.argv[2]
writes = []
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(mode, str):
            writing = any(c in mode for c in "wax+")
        else:
            writing = bool((flags or 0) & WRITE_FLAGS)
        paths = [path] if writing else []
    elif event in ("os.rename", "os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree", "os.truncate"):
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    else:
        return
    for path in paths:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(root):
            writes.append([event, os.fspath(path)])

sys.addaudithook(hook)
from pipeline.cli import cli
try:
    cli.main(args=sys.argv[3:], prog_name="pipeline", standalone_mode=False)
finally:
    with open(record, "w") as f:
        json.dump(writes, f)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one_on_the_combined_batches(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", n_train=150, n_val=10)
    settings = dict(max_steps=STEPS, validate_every=3, max_epochs=100, log_every=2, keep_last=2)
    model = dict(dropout=0.0, attention_dropout=0.0)

    # One process: update_freq 2 takes batches (0, 1), (2, 3), ... of each epoch's list.
    single = tiny_raw(model, update_freq=2, **settings)
    alone = corpus.__class__(
        corpus.bin_dir, corpus.bpe_dir, tmp_path / "one/model", tmp_path / "one/ckpt", tmp_path / "one/log"
    )
    train(P.from_dict(single), alone, tracking=False)

    # Two ranks, update_freq 1: rank r takes batches r, r + 2, ... (data.shard), so update k
    # sees batches 2k and 2k + 1: the same sentences as the single process's update k.
    data = ParallelData.load(corpus.bin_dir, "train")
    n_batches = len(token_batches(data.src.lengths, data.tgt.lengths, 64, shuffle=True, seed=1, epoch=1))
    assert 2 * STEPS <= n_batches, "the comparison must stay inside epoch 1"
    # ... and the ranks read the corpus in shards of 40 sentences (the last shorter), memory-mapped
    sharded = reshard(corpus.bin_dir, tmp_path / "sharded", 40)
    assert len(list(sharded.glob("train.src.*.bin"))) == 4
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_raw(model, update_freq=1, **settings)), encoding="utf-8")
    out = tmp_path / "two"
    args = [
        "train",
        "--params",
        str(params_file),
        "--bin",
        str(sharded),
        "--bpe",
        str(corpus.bpe_dir),
        "--out",
        str(out / "model"),
        "--checkpoints",
        str(out / "ckpt"),
        "--log",
        str(out / "log"),
        "--no-tracking",
    ]
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            WORLD_SIZE="2",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        record = tmp_path / f"writes{rank}.json"
        cmd = [sys.executable, "-c", RANK_SCRIPT, str(tmp_path / "two"), str(record), *args]
        procs.append(
            subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (_stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    assert "2 process(es)" in outputs[0][1]

    state = checkpoint.load(out / "ckpt/last.pt")
    reference = checkpoint.load(alone.ckpt_dir / "last.pt")
    assert state["progress"]["step"] == reference["progress"]["step"] == STEPS
    assert state["progress"]["tokens"] == reference["progress"]["tokens"]
    for name, tensor in reference["model"].items():
        assert torch.allclose(state["model"][name], tensor, atol=1e-6, rtol=0), name
    # the logged losses are of the same updates
    for a, b in zip(read_tsv(out / "log/steps.tsv")[1:], read_tsv(alone.log_dir / "steps.tsv")[1:]):
        assert a[:2] == b[:2] and float(a[2]) == pytest.approx(float(b[2]), rel=1e-5)
    assert len(state["rng"]) == 2  # each rank's dropout stream is saved

    writes = [json.loads((tmp_path / f"writes{rank}.json").read_text()) for rank in range(2)]
    assert writes[1] == [], f"rank 1 wrote files: {writes[1][:5]}"
    written = {Path(path).name for _, path in writes[0]}
    assert {"last.pt", "model.pt", "steps.tsv", "summary.json"} <= written
    assert json.loads((out / "log/summary.json").read_text())["world_size"] == 2
