"""train.init_from: a child starts from its parent's weights, trains on from them, records its parent,
and is refused, before it writes anything, where its architecture or vocabulary is not the parent's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from pipeline import lineage
from pipeline import params as P
from pipeline.errors import ParamsError, UserError
from pipeline.model import checkpoint
from pipeline.stages.bpe import copy_parent
from pipeline.stages.train import train
from pipeline.training import loop
from pipeline.training.loop import Trainer
from pipeline.training.observer import Quiet, RunStart
from pipeline.training.state import Paths
from tests.support.corpora import read_tsv
from tests.support.models import make_corpus, tiny_raw

PARENT_TRAIN = dict(max_steps=60, validate_every=20, keep_last=3, label_smoothing=0.0)


def child_params(init_from: Path | None, model: dict | None = None, **train: object) -> P.Params:
    """The parent's settings, but for dropout off (not architecture: it may differ) and `model`/`train`."""
    raw = tiny_raw({"dropout": 0.0, **(model or {})}, **{**PARENT_TRAIN, "max_steps": 8, **train})
    raw["train"]["init_from"] = None if init_from is None else str(init_from)
    return P.from_dict(raw)


def child_paths(root: Path, corpus: Paths) -> Paths:
    return Paths(corpus.bin_dir, root / "bpe", root / "model", root / "checkpoints", root / "log")


def scratch_paths(root: Path, corpus: Paths) -> Paths:
    """Outputs under root, over the corpus's own (trained) vocabulary."""
    return Paths(corpus.bin_dir, corpus.bpe_dir, root / "model", root / "checkpoints", root / "log")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Paths:
    return make_corpus(tmp_path_factory.mktemp("corpus"), n_train=240, n_val=20)


@pytest.fixture(scope="module")
def parent(corpus: Paths, tmp_path_factory) -> Path:
    """A model trained 60 updates to copy, as the train stage writes it."""
    root = tmp_path_factory.mktemp("parent")
    paths = Paths(corpus.bin_dir, corpus.bpe_dir, root / "model", root / "checkpoints", root / "log")
    train(P.from_dict(tiny_raw(**PARENT_TRAIN)), paths, tracking=False)
    return paths.out_dir


def prepared(root: Path, corpus: Paths, params: P.Params) -> Paths:
    """The child's paths, with data/bpe as the bpe stage writes it for train.init_from."""
    paths = child_paths(root, corpus)
    copy_parent(params, paths.bpe_dir)
    return paths


def parent_weights(parent: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(parent / "model.pt")["model"]


# --- starting from the parent ---------------------------------------------------------------


def test_the_child_starts_with_its_parents_weights(parent, corpus, tmp_path):
    params = child_params(parent)
    trainer = Trainer(params, prepared(tmp_path, corpus, params))
    theirs = parent_weights(parent)
    ours = trainer.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_its_val_loss_before_training_is_the_one_its_parent_was_chosen_by(parent, corpus, tmp_path):
    params = child_params(parent)
    trainer = Trainer(params, prepared(tmp_path, corpus, params))
    best = checkpoint.load(parent / "model.pt")["step"]
    logged = {int(row[0]): float(row[2]) for row in read_tsv(parent.parent / "log" / "valid.tsv")[1:]}
    assert trainer.val.loss() == pytest.approx(logged[best], rel=1e-5)
    scratch = Trainer(child_params(None), scratch_paths(tmp_path, corpus))
    assert scratch.val.loss() > logged[best] + 0.5  # the parent learned something: a real comparison


def test_training_goes_on_from_the_parent_and_the_schedule_starts_afresh(parent, corpus, tmp_path):
    params = child_params(parent, log_every=1)
    paths = prepared(tmp_path / "child", corpus, params)
    summary = train(params, paths, tracking=False)
    scratch = scratch_paths(tmp_path / "scratch", corpus)
    train(child_params(None, log_every=1), scratch, tracking=False)
    child_steps, scratch_steps = (read_tsv(p.log_dir / "steps.tsv")[1:] for p in (paths, scratch))
    parent_last = float(read_tsv(parent.parent / "log" / "steps.tsv")[-1][2])
    first = float(child_steps[0][2])
    assert first < float(scratch_steps[0][2]) - 0.5  # the first update already sees the parent's weights
    assert first < parent_last + 0.5
    assert [row[3] for row in child_steps] == [row[3] for row in scratch_steps]  # warmup from step 1 again
    assert summary["steps"] == 8 and math.isfinite(summary["best_val_loss"])


def test_the_model_directory_and_the_mlflow_run_name_the_parent(parent, corpus, tmp_path, monkeypatch):
    started: list[RunStart] = []
    monkeypatch.setattr(loop, "mlflow_run", lambda start: started.append(start) or Quiet())
    params = child_params(parent, max_steps=2)
    paths = prepared(tmp_path, corpus, params)
    train(params, paths, tracking=True)
    record = json.loads((paths.out_dir / lineage.PARENT_FILE).read_text(encoding="utf-8"))
    assert record["path"] == str(parent)
    assert record["model_sha256"] == lineage.sha256(parent / "model.pt")
    assert record["parent"] is None  # the parent was trained from scratch
    (start,) = started
    assert start.params["train"]["init_from"] == str(parent)  # an MLflow param
    assert start.tags["parent"] == str(parent) and start.tags["parent_model_sha256"] == record["model_sha256"]
    assert "parent_run_id" not in start.tags  # the parent's own run was not tracked


def test_a_grandchild_records_the_whole_lineage(parent, corpus, tmp_path):
    params = child_params(parent, max_steps=2)
    child = prepared(tmp_path / "child", corpus, params)
    train(params, child, tracking=False)
    (child.out_dir / lineage.RUN_FILE).write_text('{"run_id": "abc123", "tracking_uri": "sqlite:///x.db"}')
    params = child_params(child.out_dir, max_steps=2)
    grandchild = prepared(tmp_path / "grandchild", corpus, params)
    train(params, grandchild, tracking=False)
    record = json.loads((grandchild.out_dir / lineage.PARENT_FILE).read_text(encoding="utf-8"))
    assert record["path"] == str(child.out_dir) and record["mlflow_run_id"] == "abc123"
    assert record["parent"]["path"] == str(parent)


# --- refusals, before anything is written -----------------------------------------------------


def assert_refused(params: P.Params, paths: Paths, error: type[Exception], *fragments: str) -> None:
    with pytest.raises(error) as caught:
        train(params, paths, tracking=False)
    message = caught.value.message  # type: ignore[attr-defined]
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert not any(p.exists() for p in (paths.out_dir, paths.ckpt_dir, paths.log_dir))


def test_another_architecture_is_refused_naming_both_values_and_the_fix(parent, corpus, tmp_path):
    params = child_params(parent)
    paths = prepared(tmp_path, corpus, params)
    other = child_params(parent, {"d_model": 64, "activation": "gelu"})
    assert_refused(
        other,
        paths,
        ParamsError,
        "train.init_from:",
        "model.d_model 64 here, 32 in the parent",
        "model.activation gelu here, relu in the parent",
        "-S model.d_model=32 -S model.activation=relu",
    )


def test_the_same_depths_spelled_otherwise_are_the_same_architecture(parent, corpus, tmp_path):
    params = child_params(parent, {"n_layers": None, "encoder_layers": 1, "decoder_layers": 1}, max_steps=1)
    train(params, prepared(tmp_path, corpus, params), tracking=False)


def test_a_changed_parent_is_refused_until_the_bpe_stage_copies_it_again(parent, corpus, tmp_path):
    params = child_params(parent)
    paths = prepared(tmp_path, corpus, params)
    changed = tmp_path / "changed"
    changed.mkdir()
    for f in parent.iterdir():
        (changed / f.name).write_bytes(f.read_bytes())
    payload = checkpoint.load(changed / "model.pt")
    payload["model"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in payload["model"].items()}
    checkpoint.save(changed / "model.pt", payload)
    (paths.bpe_dir / lineage.PARENT_FILE).write_text(
        json.dumps({**json.loads((paths.bpe_dir / lineage.PARENT_FILE).read_text()), "path": str(changed)})
    )
    assert_refused(child_params(changed), paths, UserError, "changed since the bpe stage copied", "sha256")
    copy_parent(child_params(changed), paths.bpe_dir)
    trainer = Trainer(child_params(changed), paths)
    assert torch.equal(trainer.model.state_dict()["out_weight"], payload["model"]["out_weight"])


def test_a_trained_vocabulary_or_another_parents_is_refused(parent, corpus, tmp_path):
    trained = scratch_paths(tmp_path, corpus)
    assert_refused(child_params(parent), trained, UserError, "a vocabulary the bpe stage trained")
    paths = prepared(tmp_path / "a", corpus, child_params(parent))
    assert_refused(child_params(None), paths, UserError, "train.init_from is null", str(parent))


def test_a_parent_that_is_no_model_directory_is_refused(parent, corpus, tmp_path):
    paths = prepared(tmp_path, corpus, child_params(parent))
    assert_refused(child_params(tmp_path / "nowhere"), paths, ParamsError, "no such directory")
    (tmp_path / "empty").mkdir()
    assert_refused(child_params(tmp_path / "empty"), paths, ParamsError, "not a model directory", "model.pt")
