"""The run state: Progress and the RNG survive last.pt, what a resumed run may change, checkpoint files."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model.transformer import build_model
from pipeline.training.distributed import ALONE, Dist
from pipeline.training.state import (
    LAST,
    Interval,
    LogRow,
    Paths,
    Progress,
    RunState,
    Validation,
    average,
    load_payload,
    remove_stale_temps,
    rng_state,
    set_rng_state,
)
from pipeline.training.step import UpdateStep, resolve_train
from tests.support.models import VOCAB, make_corpus, tiny_params

CPU = torch.device("cpu")


def test_progress_round_trips_through_last_pt(tmp_path):
    progress = Progress(
        step=12,
        epoch=3,
        position=5,
        tokens=4321,
        best_step=8,
        best_metric=-2.5,
        interval=Interval(loss_sum=17.25, tokens=96, seconds=0.5),
        steps=[LogRow(6, 2, 3.1, 1e-3, 950.0), LogRow(12, 3, 2.9, 2e-3, 1010.5)],
        valid=[Validation(8, 2, 2.5, None), Validation(12, 3, 2.6, None)],
        kept=[8, 12],
        run={"run_id": "r", "tracking_uri": "sqlite:///m.db"},
    )
    checkpoint.save(tmp_path / "state.pt", {"progress": progress.to_dict()})
    saved = checkpoint.load(tmp_path / "state.pt")["progress"]  # weights_only: plain values only
    assert saved["interval"] == {"loss_sum": 17.25, "tokens": 96, "seconds": 0.5}
    assert saved["valid"][0] == [8, 2, 2.5, None]  # the valid.tsv row, as a list
    loaded = Progress.from_dict(saved)
    assert loaded == progress
    assert loaded.steps[1].tokens_per_s == 1010.5 and loaded.interval.tokens == 96
    assert loaded.best_validation() == Validation(8, 2, 2.5, None)
    assert Progress().best_validation() is None


def test_restored_rng_draws_what_it_would_have_drawn():
    def draws() -> tuple:
        return torch.rand(3).tolist(), random.random(), np.random.rand(2).tolist()

    saved = rng_state(CPU)
    expected = draws()
    draws()  # e.g. a validation's sampling
    set_rng_state(saved, CPU)
    assert draws() == expected


@pytest.fixture
def run_state(tmp_path):
    """A RunState over a tiny corpus, for a params variant; -> its maker."""
    paths = make_corpus(tmp_path, n_train=20)

    def make(dist: Dist = ALONE, **train) -> RunState:
        params = resolve_train(tiny_params(**train), CPU)
        torch.manual_seed(0)
        update = UpdateStep(params, build_model(params.model, VOCAB, VOCAB), CPU)
        return RunState(params, paths, dist, update, Vocab.load(paths.bpe_dir))

    return make


def test_a_resumed_run_may_change_only_what_alters_no_weight(run_state):
    saved = run_state().to_dict(rngs=[rng_state(CPU)])
    harmless = run_state(log_every=7, threads=2, skip_bad_batches=True)
    assert harmless.changes_from(saved) == []
    assert run_state(lr=0.01).changes_from(saved) == ["train.lr: 0.005 -> 0.01"]
    assert run_state(Dist(rank=0, world_size=2)).changes_from(saved) == ["1 processes -> 2"]


def test_state_of_another_format_is_refused(run_state):
    state = run_state()
    state.paths.ckpt_dir.mkdir()
    checkpoint.save(state.paths.ckpt_dir / LAST, state.to_dict([rng_state(CPU)]) | {"format": "other"})
    with pytest.raises(UserError, match="not a training state of this pipeline"):
        state.resume("refuse", say=print)


def test_resume_restores_the_saved_progress_and_tensors(run_state, capsys):
    state = run_state()
    state.progress.step, state.progress.epoch, state.progress.position = 4, 2, 3
    state.paths.ckpt_dir.mkdir()
    checkpoint.save(state.paths.ckpt_dir / LAST, state.to_dict([rng_state(CPU)]))
    again = run_state()
    with torch.no_grad():
        next(again.update.model.parameters()).add_(1.0)  # differs until resumed
    again.resume("refuse", say=print)
    assert "resuming from step 4 (epoch 2, batch 3)" in capsys.readouterr().out
    assert again.progress == state.progress
    for (name, a), b in zip(again.update.model.named_parameters(), state.update.model.parameters()):
        assert torch.equal(a, b), name


def test_average_is_the_float64_mean_and_keeps_the_rest_of_the_last():
    payloads = [
        {"step": s, "model": {"w": torch.tensor([1.0, 2.0]) * s, "n": torch.tensor([s])}} for s in (1, 2, 4)
    ]
    averaged = average(payloads)
    assert torch.equal(averaged["model"]["w"], torch.tensor([7 / 3, 14 / 3], dtype=torch.float32))
    assert torch.equal(averaged["model"]["n"], torch.tensor([4])) and averaged["step"] == 4


def test_a_payload_from_another_step_is_refused(tmp_path):
    checkpoint.save(tmp_path / "ckpt_8.pt", {"step": 6, "model": {}})
    assert load_payload(tmp_path / "ckpt_8.pt", 6)["step"] == 6
    with pytest.raises(UserError, match="from step 6, but the training state expects step 8"):
        load_payload(tmp_path / "ckpt_8.pt", 8)


def test_remove_stale_temps_removes_unfinished_writes_only(tmp_path):
    paths = Paths(*(tmp_path / name for name in ("bin", "bpe", "model", "checkpoints", "log")))
    for folder in (paths.ckpt_dir, paths.log_dir):
        folder.mkdir()
        (folder / ".last.pt.123.tmp").mkdir()  # files.atomic_path writes inside a temporary folder
        (folder / ".last.pt.123.tmp" / "last.pt").write_bytes(b"half")
        (folder / "keep.pt").write_bytes(b"whole")
    (tmp_path / f".{paths.out_dir.name}.9.tmp").mkdir()
    remove_stale_temps(paths)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert left == ["checkpoints", "checkpoints/keep.pt", "log", "log/keep.pt"]
