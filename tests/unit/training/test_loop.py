"""The training loop, through the train stage: a tiny model learns to copy; logs, outputs, failures,
resume refusals, MLflow.

The corpus is synthetic: random subword ids of a tiny sentencepiece model,
written straight in binarize's on-disk format (helpers shared with
test_resume and test_distributed).
"""

from __future__ import annotations

import errno
import json
from typing import ClassVar

import numpy as np
import pytest
import torch
import yaml

from pipeline import params as P
from pipeline.data.batching import ParallelData
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model import transformer as model_module
from pipeline.stages.train import train
from pipeline.tracking import tracker
from pipeline.tracking.tracker import Tracker
from pipeline.training import state
from pipeline.training.state import Paths
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, model_weights, tiny_params

# --- learning, and what a run writes --------------------------------------------------------


COPY_MODEL = dict(d_model=64, n_heads=4, d_ff=128, n_layers=1, dropout=0.0)
COPY_TRAIN = dict(
    lr=5e-3,
    warmup_steps=30,
    max_tokens=128,
    max_epochs=12,
    validate_every=0,
    log_every=9,
    label_smoothing=0.0,
    early_stop_metric="bleu",
    keep_last=3,
)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory) -> tuple[Paths, P.Params, dict]:
    """A model trained to copy random sequences (~5 s)."""
    paths = make_corpus(tmp_path_factory.mktemp("copy"), n_train=500)
    params = tiny_params(COPY_MODEL, **COPY_TRAIN)
    return paths, params, train(params, paths, tracking=False)


def test_a_tiny_model_learns_to_copy(copy_run):
    paths, _, summary = copy_run
    steps = read_tsv(paths.log_dir / "steps.tsv")
    first_loss, last_loss = float(steps[1][2]), float(steps[-1][2])
    assert first_loss > 2.5 and last_loss < 0.5, (first_loss, last_loss)
    assert summary["best_val_loss"] < 0.35
    assert summary["best_val_bleu"] > 50


def test_logs_have_the_right_columns_and_rows(copy_run):
    paths, _, summary = copy_run
    steps = read_tsv(paths.log_dir / "steps.tsv")
    assert steps[0] == ["step", "epoch", "loss", "lr", "tokens_per_s"]
    assert [int(r[0]) for r in steps[1:]] == list(range(9, summary["steps"] + 1, 9))
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in steps[1:])
    valid = read_tsv(paths.log_dir / "valid.tsv")
    assert valid[0] == ["step", "epoch", "val_loss", "val_bleu"]
    # validate_every 0: once per epoch, at its last update
    assert [int(r[1]) for r in valid[1:]] == list(range(1, 13))
    assert int(valid[-1][0]) == summary["steps"]


def test_summary_describes_the_run(copy_run):
    paths, _, summary = copy_run
    on_disk = json.loads((paths.log_dir / "summary.json").read_text())
    assert on_disk == summary
    for key in (
        "n_params",
        "train_seconds",
        "tokens_per_s",
        "best_step",
        "best_val_bleu",
        "best_val_loss",
        "device",
        "precision",
        "stopped",
        "steps",
        "epochs",
        "averaged",
    ):
        assert key in summary
    assert summary["stopped"] == "max_epochs" and summary["epochs"] == 12
    assert summary["device"] == "cpu" and summary["precision"] == "fp32" and summary["averaged"] == 0
    valid = read_tsv(paths.log_dir / "valid.tsv")[1:]
    best = max(valid, key=lambda r: float(r[3]))
    assert summary["best_step"] == int(best[0])
    assert summary["tokens_per_s"] > 0 and summary["train_seconds"] > 0


def test_model_dir_holds_the_best_checkpoint_params_and_vocab(copy_run):
    paths, params, summary = copy_run
    out = paths.out_dir
    names = sorted(p.name for p in out.iterdir())
    assert names == ["mlflow_run.json", "model.pt", "params.yaml", "spm.model"]
    payload = checkpoint.load(out / "model.pt")
    assert payload["step"] == summary["best_step"]
    for name, tensor in model_weights(paths.ckpt_dir / "best.pt").items():
        assert torch.equal(payload["model"][name], tensor)
    _, loaded = checkpoint.restore_model(payload, out / "model.pt")
    assert loaded == params
    assert P.from_dict(yaml.safe_load((out / "params.yaml").read_text())) == params
    assert (out / "spm.model").read_bytes() == (paths.bpe_dir / "spm.model").read_bytes()
    assert json.loads((out / "mlflow_run.json").read_text()) == {"run_id": None, "tracking_uri": None}


def test_checkpoints_keep_the_last_validations_and_the_best(copy_run):
    paths, _, _ = copy_run
    names = sorted(p.name for p in paths.ckpt_dir.iterdir())
    valid_steps = [int(r[0]) for r in read_tsv(paths.log_dir / "valid.tsv")[1:]]
    assert names == sorted(["best.pt", "last.pt"] + [f"ckpt_{s}.pt" for s in valid_steps[-3:]])
    state = checkpoint.load(paths.ckpt_dir / "last.pt")
    assert state["progress"]["stopped"] == "max_epochs"
    assert {"model", "optimizer", "scheduler", "scaler", "rng", "params", "progress"} <= set(state)


def test_average_is_the_element_wise_mean(copy_run):
    paths, _, summary = copy_run
    steps = [int(r[0]) for r in read_tsv(paths.log_dir / "valid.tsv")[-2:]]
    averaged = state.average([checkpoint.load(paths.ckpt_dir / f"ckpt_{s}.pt") for s in steps])
    a, b = (model_weights(paths.ckpt_dir / f"ckpt_{s}.pt") for s in steps)
    for name in a:
        assert torch.allclose(averaged["model"][name], (a[name] + b[name]) / 2)
    assert averaged["step"] == summary["steps"]


def test_end_to_end_average_and_summary(tmp_path):
    paths = make_corpus(tmp_path, n_train=60)
    params = tiny_params(max_steps=8, validate_every=2, keep_last=3, average_last=3)
    summary = train(params, paths, tracking=False)
    assert summary["averaged"] == 3 and summary["stopped"] == "max_steps" and summary["steps"] == 8
    kept = [model_weights(paths.ckpt_dir / f"ckpt_{s}.pt") for s in (4, 6, 8)]
    final = model_weights(paths.out_dir / "model.pt")
    for name, tensor in final.items():
        assert torch.allclose(tensor, sum(k[name] for k in kept) / 3, atol=1e-7)


def test_decoder_only_with_learned_positions_drops_too_long_sentences(tmp_path, capsys):
    paths = make_corpus(tmp_path, n_train=80, lengths=(2, 12))
    params = tiny_params(
        dict(arch="decoder_only", positions="learned", max_positions=20), max_steps=6, val_bleu=False
    )
    src = ParallelData.load(paths.bin_dir, "train")
    too_long = int(np.sum(src.src.lengths + src.tgt.lengths + 2 > 20))
    assert too_long > 0
    summary = train(params, paths, tracking=False)
    assert f"dropped {too_long} of 80 train sentences" in capsys.readouterr().err
    assert summary["steps"] == 6 and summary["best_val_bleu"] is None
    assert read_tsv(paths.log_dir / "valid.tsv")[1][3] == "nan"


# --- failures ----------------------------------------------------------------------------


def inject_nan(monkeypatch, at_update: int) -> None:
    """Make the training loss NaN in update `at_update` (counting training calls only)."""
    real = model_module.projected_loss
    calls = {"n": 0}

    def loss(*args, **kwargs):
        value = real(*args, **kwargs)
        if torch.is_grad_enabled():  # validation runs without gradients
            calls["n"] += 1
            if calls["n"] == at_update:
                return value * float("nan")
        return value

    monkeypatch.setattr(model_module, "projected_loss", loss)


def test_nan_loss_stops_naming_the_update_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    paths = make_corpus(tmp_path, n_train=100)
    params = tiny_params(max_steps=12, validate_every=3)
    inject_nan(monkeypatch, at_update=5)
    expected = r"non-finite loss at update 5 .*last checkpoint.*update 3\), is intact"
    with pytest.raises(UserError, match=expected):
        train(params, paths, tracking=False)
    state = checkpoint.load(paths.ckpt_dir / "last.pt")
    assert state["progress"]["step"] == 3 and not (paths.ckpt_dir / "ckpt_5.pt").exists()
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert not paths.out_dir.exists()

    # The way out the message offers: skip_bad_batches may be switched on for the resume.
    monkeypatch.undo()
    summary = train(tiny_params(max_steps=12, validate_every=3, skip_bad_batches=True), paths, tracking=False)
    assert summary["steps"] == 12


def test_skip_bad_batches_skips_the_update_and_goes_on(tmp_path, monkeypatch, capsys):
    paths = make_corpus(tmp_path, n_train=100)
    inject_nan(monkeypatch, at_update=4)
    summary = train(tiny_params(max_steps=8, skip_bad_batches=True), paths, tracking=False)
    err = capsys.readouterr().err
    assert "non-finite loss at update 4" in err and "skipped it (1 so far)" in err
    assert summary["skipped_updates"] == 1 and summary["steps"] == 8
    final = checkpoint.load(paths.ckpt_dir / "last.pt")
    assert all(torch.isfinite(t).all() for t in final["model"].values())
    # not a TTY: a plain line every log_every updates
    assert "step 2 | epoch 1 | loss " in err and "step 8 | epoch" in err


def test_disk_full_while_saving_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    paths = make_corpus(tmp_path, n_train=100)
    params = tiny_params(max_steps=12, validate_every=3)
    real_save = torch.save
    seen = {"last": 0, "before": None}

    def save(obj, f, *args, **kwargs):
        if "progress" in obj:  # the full training state, i.e. last.pt
            seen["last"] += 1
            if seen["last"] == 2:
                seen["before"] = (paths.ckpt_dir / "last.pt").read_bytes()
                f.write(b"half a checkpoint")
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(UserError, match=r"No space left on device.*free disk space.*resumes from"):
        train(params, paths, tracking=False)
    assert (paths.ckpt_dir / "last.pt").read_bytes() == seen["before"]
    assert checkpoint.load(paths.ckpt_dir / "last.pt")["progress"]["step"] == 3
    assert not [p for p in paths.ckpt_dir.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_fp16_on_cpu_is_refused(tmp_path):
    paths = make_corpus(tmp_path, n_train=20)
    with pytest.raises(UserError, match=r"fp16 needs a GPU.*bf16"):
        train(tiny_params(precision="fp16"), paths, tracking=False)


def test_resume_with_changed_params_is_refused_or_restarted(tmp_path, capsys):
    paths = make_corpus(tmp_path, n_train=60)
    train(tiny_params(max_steps=4), paths, tracking=False)
    with pytest.raises(UserError) as refused:
        train(tiny_params(max_steps=4, lr=0.01), paths, tracking=False)
    message = refused.value.message
    assert "train.lr: 0.005 -> 0.01" in message and f"delete {paths.ckpt_dir}" in message
    with pytest.raises(UserError, match=r"model.d_model: 32 -> 48"):
        train(tiny_params(dict(d_model=48), max_steps=4), paths, tracking=False)

    summary = train(tiny_params(max_steps=4, lr=0.01), paths, on_change="restart", tracking=False)
    assert "starting afresh" in capsys.readouterr().err
    assert summary["steps"] == 4
    assert checkpoint.load(paths.ckpt_dir / "last.pt")["params"]["train"]["lr"] == 0.01


def test_resume_under_changed_code_is_refused_or_restarted(tmp_path, capsys, monkeypatch):
    paths = make_corpus(tmp_path, n_train=60)
    train(tiny_params(max_steps=4), paths, tracking=False)
    real = state.code_fingerprint()
    edited = dict(real, **{"model/transformer.py": "0" * 64})
    monkeypatch.setattr(state, "code_fingerprint", lambda: edited)
    with pytest.raises(UserError, match=r"the training code changed \(pipeline/model/transformer\.py\)"):
        train(tiny_params(max_steps=4), paths, tracking=False)
    summary = train(tiny_params(max_steps=4), paths, on_change="restart", tracking=False)
    assert "starting afresh" in capsys.readouterr().err and summary["steps"] == 4
    assert checkpoint.load(paths.ckpt_dir / "last.pt")["code"] == edited
    monkeypatch.setattr(state, "code_fingerprint", lambda: edited)  # the same code again: resumes
    train(tiny_params(max_steps=4), paths, tracking=False)
    assert "resuming from step 4" in capsys.readouterr().err


def test_a_finished_run_only_rebuilds_its_outputs(tmp_path, capsys):
    paths = make_corpus(tmp_path, n_train=60)
    params = tiny_params(max_steps=4)
    first = train(params, paths, tracking=False)
    weights = model_weights(paths.out_dir / "model.pt")
    last = (paths.ckpt_dir / "last.pt").read_bytes()
    for name in ("model.pt", "params.yaml"):
        (paths.out_dir / name).unlink()
    (paths.log_dir / "steps.tsv").unlink()
    again = train(params, paths, tracking=False)
    assert "resuming from step 4 (finished" in capsys.readouterr().err
    assert (paths.ckpt_dir / "last.pt").read_bytes() == last
    assert {k: v for k, v in again.items() if k != "train_seconds"} == {
        k: v for k, v in first.items() if k != "train_seconds"
    }
    for name, tensor in model_weights(paths.out_dir / "model.pt").items():
        assert torch.equal(tensor, weights[name])
    assert (paths.log_dir / "steps.tsv").is_file()


# --- MLflow, through a tracker that records instead of calling MLflow ----------------------


class RecordingTracker(Tracker):
    records: ClassVar[list[tuple[str, dict]]] = []

    def _submit(self, record: dict) -> None:
        if self._state == "disabled":
            return
        if record["op"] == "start":
            self._run_id = "run-1"
        RecordingTracker.records.append((record["op"], {**record, "run_id": self._run_id}))

    def start_system_metrics(self, resume: bool = False) -> None:
        RecordingTracker.records.append(("system_metrics", {"resume": resume, "run_id": self._run_id}))


def test_mlflow_run_is_started_logged_to_and_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(tracker, "Tracker", RecordingTracker)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////nowhere/mlflow.db")
    monkeypatch.setenv("DVC_EXP_NAME", "tiny-exp")
    RecordingTracker.records = []
    paths = make_corpus(tmp_path, n_train=60)
    train(tiny_params(max_steps=4), paths)
    ops = [op for op, _ in RecordingTracker.records]
    start = RecordingTracker.records[0][1]
    assert ops[0] == "start" and start["run_name"] == "de-en encoder_decoder tiny-exp"
    assert start["experiment"] == "nmt"
    metrics = [r for op, r in RecordingTracker.records if op == "metrics"]
    assert any("train_loss" in m["metrics"] and "lr" in m["metrics"] for m in metrics)
    assert any("val_loss" in m["metrics"] and "val_bleu" in m["metrics"] for m in metrics)
    assert any("train_seconds" in m["metrics"] for m in metrics)
    assert not any("n_params" in m["metrics"] for m in metrics)  # a constant: a tag
    assert int(start["tags"]["n_params"]) > 0
    assert ops[1:].count("system_metrics") == 1
    artifacts = {(r["path"], r["artifact_path"]) for op, r in RecordingTracker.records if "artifact" in op}
    assert (str(paths.log_dir.resolve()), "train") in artifacts
    assert "model" not in ops  # the score stage logs the model: an MLflow change must not retrain
    assert ops[-1] == "end"
    assert json.loads((paths.out_dir / "mlflow_run.json").read_text()) == {
        "run_id": "run-1",
        "tracking_uri": "sqlite:////nowhere/mlflow.db",
    }
    # A rerun continues the recorded run instead of starting another.
    RecordingTracker.records = []
    train(tiny_params(max_steps=4), paths)
    assert "start" not in [op for op, _ in RecordingTracker.records]
    assert all(r["run_id"] == "run-1" for _, r in RecordingTracker.records)
    assert ("system_metrics", {"resume": True, "run_id": "run-1"}) in RecordingTracker.records


def test_auto_precision_is_recorded_as_the_precision_the_run_used(tmp_path, monkeypatch):
    from pipeline.training import step as step_module

    monkeypatch.setattr(step_module, "native_bf16", lambda device: False)
    paths = make_corpus(tmp_path, n_train=40)
    summary = train(tiny_params(max_steps=2, precision="auto"), paths, tracking=False)
    assert summary["precision"] == "fp32"
    saved = yaml.safe_load((paths.out_dir / "params.yaml").read_text(encoding="utf-8"))
    assert saved["train"]["precision"] == "fp32"
    assert checkpoint.load(paths.ckpt_dir / "last.pt")["params"]["train"]["precision"] == "fp32"
