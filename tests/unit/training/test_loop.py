"""The training loop, through the train stage: a tiny model learns to copy; logs, outputs, failures,
resume refusals, MLflow; epoch batches and validation on a Trainer.

The corpus is synthetic: random subword ids of a tiny sentencepiece model,
written straight in binarize's on-disk format (helpers shared with
test_resume and test_distributed).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import random
from typing import ClassVar

import numpy as np
import pytest
import torch
import yaml

from pipeline import params as P
from pipeline.data import batching
from pipeline.data.batching import ParallelData, token_batches
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model import transformer as model_module
from pipeline.stages.train import train
from pipeline.tracking import tracker
from pipeline.tracking.tracker import Tracker
from pipeline.training import state
from pipeline.training.loop import Trainer
from pipeline.training.state import Paths
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, make_text_corpus, model_weights, tiny_params, tiny_raw

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


# --- batches and validation ------------------------------------------------------------------


def test_epoch_batches_are_token_batches_of_the_fitting_sentences(tmp_path):
    paths = make_corpus(tmp_path, n_train=80, lengths=(2, 12))
    params = tiny_params(dict(arch="decoder_only", positions="learned", max_positions=20))
    trainer = Trainer(params, paths)
    ids, data, t = trainer.train_ids, trainer.train_data, params.train
    assert 0 < len(ids) < len(data)  # some sentences are too long
    for epoch in (1, 2):
        expected = token_batches(
            data.src.lengths[ids], data.tgt.lengths[ids], t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch
        )
        expected = [ids[b].tolist() for b in expected]
        assert [b.tolist() for b in trainer.epoch_batches(epoch)] == expected
        usable = len(expected) - len(expected) % 2
        for rank in (0, 1):  # rank r of two: every other batch of the same list, from r
            shard = batching.epoch_batches(
                data, t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch, rank=rank, world_size=2, ids=ids
            )
            assert [b.tolist() for b in shard] == expected[rank:usable:2]
    first, second = trainer.epoch_batches(1), trainer.epoch_batches(2)
    assert [b.tolist() for b in first] != [b.tolist() for b in second]  # reshuffled every epoch
    for batches in (first, second):  # every fitting sentence once, no other
        assert np.sort(np.concatenate(batches)).tolist() == ids.tolist()


def test_source_weights_decide_each_sources_draws_per_epoch(tmp_path):
    paths = make_corpus(tmp_path, n_train=60, lengths=(2, 8))
    meta = (
        json.loads((paths.bin_dir / "meta.json").read_text())
        if (paths.bin_dir / "meta.json").is_file()
        else {}
    )
    meta["sources"] = [{"name": "news", "sentences": 40}, {"name": "web", "sentences": 20}]
    (paths.bin_dir / "meta.json").write_text(json.dumps(meta))
    natural = Trainer(tiny_params(), paths)
    assert natural.sources.natural and natural.sources.drawn_per_epoch() == {"news": 40, "web": 20}
    every = np.sort(np.concatenate(natural.epoch_batches(1)))
    assert every.tolist() == natural.train_ids.tolist()  # the default: every fitting pair once, as before

    def sourced(**train) -> P.Params:  # params whose data.train names the corpus's two sources
        raw = tiny_raw(**train)
        raw["data"]["train"] = ["news", "web"]
        return P.from_dict(raw)

    weighted = Trainer(sourced(source_weights={"web": 2.5}), paths)
    assert weighted.sources.drawn_per_epoch() == {"news": 40, "web": 50}
    for epoch in (1, 2):
        drawn = np.concatenate(weighted.epoch_batches(epoch))
        counts = np.bincount(drawn, minlength=60)
        assert counts[:40].tolist() == [1] * 40 and counts[40:].sum() == 50
        assert set(counts[40:].tolist()) == {2, 3}
    assert weighted.summary(0)["pairs_drawn_per_epoch"] == {"news": 40, "web": 50}

    flat = Trainer(sourced(source_temperature=100.0), paths)
    assert flat.sources.drawn_per_epoch() == {"news": 30, "web": 30}  # nearly equal shares of 60

    blog = sourced()  # params that name a source the binarized corpus lacks (it was built from others)
    blog = dataclasses.replace(blog, train=dataclasses.replace(blog.train, source_weights={"blog": 2.0}))
    with pytest.raises(
        UserError, match=r"train.source_weights: no train source named blog; the train sources are news, web"
    ):
        Trainer(blog, paths)


def test_validation_leaves_every_rng_as_it_found_it(tmp_path, monkeypatch):
    trainer = Trainer(tiny_params(val_bleu=True), make_corpus(tmp_path, n_train=20))
    real_val_loss = trainer.val_loss
    # as if validating drew random numbers (dropout left on, sampling)
    monkeypatch.setattr(trainer, "val_loss", lambda: (torch.rand(3), random.random(), real_val_loss())[-1])
    state = torch.get_rng_state(), random.getstate()
    val_loss, val_bleu = trainer.evaluate()
    assert val_loss > 0 and 0 <= val_bleu <= 100
    assert torch.equal(torch.get_rng_state(), state[0]) and random.getstate() == state[1]
    assert trainer.model.training


# --- subword sampling -------------------------------------------------------------------------


def test_with_sampling_each_epoch_trains_on_its_own_segmentation_batched_by_its_lengths(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=80)
    trainer = Trainer(tiny_params(subword_sampling="bpe_dropout", subword_alpha=0.3), paths)
    try:
        one, two = trainer.epoch_data(1), trainer.epoch_data(2)
        assert len(one) == len(two) == len(trainer.train_data) == 80
        assert not np.array_equal(one.src.lengths, two.src.lengths)  # resegmented
        assert trainer.epoch_data(2) is two  # one segmentation an epoch, made once
        # sampling splits words further than data/bin's segmentation: longer, and batched by that
        assert one.src.lengths.sum() > trainer.train_data.src.lengths.sum()
        batches = trainer.epoch_batches(2)
        widest = [int(np.maximum(two.src.lengths[b], two.tgt.lengths[b]).max()) + 1 for b in batches]
        assert all(
            len(b) * w <= trainer.params.train.max_tokens or len(b) == 1 for b, w in zip(batches, widest)
        )
        assert sorted(np.concatenate(batches).tolist()) == list(range(80))
    finally:
        trainer.stop_sampling()


def test_without_sampling_the_epochs_train_on_data_bin(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=40)
    trainer = Trainer(tiny_params(), paths)
    assert trainer.epoch_data(1) is trainer.epoch_data(2) is trainer.train_data


def test_sampling_of_the_wrong_kind_for_the_model_or_without_the_text_is_refused(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=40)  # a BPE model
    raw = tiny_params().to_dict()
    raw["bpe"]["model_type"] = "unigram"
    raw["train"].update(subword_sampling="unigram")
    with pytest.raises(
        UserError, match=r"train.subword_sampling: unigram needs a unigram model, but .* holds a bpe"
    ):
        Trainer(P.from_dict(raw), paths)
    no_text = Paths(paths.bin_dir, paths.bpe_dir, paths.out_dir, paths.ckpt_dir, paths.log_dir)
    with pytest.raises(UserError, match=r"segments the clean text each epoch; pass --clean data/clean"):
        Trainer(tiny_params(subword_sampling="bpe_dropout"), no_text)
