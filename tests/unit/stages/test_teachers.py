"""The teachers stage: one training per seed of distill.teacher_seeds with data/model's settings,
a marker alone when there is nothing to train, and the distill stage reading what it wrote."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline import params as P
from pipeline.errors import UserError
from pipeline.stages import distill as D
from pipeline.stages import teachers as T
from tests.support.hf import make_trained_model_dir
from tests.support.repo import BASE


def seeds(*seeds: int, enabled: bool = True) -> P.Params:
    return dataclasses.replace(
        BASE, distill=dataclasses.replace(BASE.distill, enabled=enabled, teacher_seeds=seeds)
    )


@pytest.mark.parametrize("params", [seeds(2, 3, enabled=False), seeds()], ids=["off", "no seeds"])
def test_with_nothing_to_train_it_writes_a_marker_alone_and_clears_what_another_run_left(tmp_path, params):
    out = tmp_path / "teachers"
    (out / "seed7").mkdir(parents=True)
    (out / "seed7" / "model.pt").write_bytes(b"a teacher of seeds no longer asked for")
    ran = T.teachers(params, (tmp_path, tmp_path, tmp_path), tmp_path / "work", out)
    assert ran == [] and [p.name for p in out.iterdir()] == [T.OFF]


def test_each_seed_trains_the_runs_settings_but_its_seed_into_a_directory_of_its_own(tmp_path, monkeypatch):
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(T, "run_stage", lambda _, command, *args: calls.append((command, *map(str, args))))
    out, work = tmp_path / "teachers", tmp_path / "work"
    (out / "seed2").mkdir(parents=True)  # a finished teacher from an earlier run: trained (resumed) again
    (out / T.OFF).write_text("{}")
    params = seeds(2, 3)
    assert T.teachers(params, (tmp_path / "bin", tmp_path / "bpe", tmp_path / "clean"), work, out) == [2, 3]
    assert [p.name for p in out.iterdir()] == ["seed2"]
    for call, seed in zip(calls, (2, 3), strict=True):
        args = dict(zip(call[1::2], call[2::2]))
        assert call[0] == "train" and args["--out"] == str(out / f"seed{seed}")
        assert args["--checkpoints"] == str(work / f"seed{seed}" / "checkpoints")
        assert args["--on-change"] == "restart"  # other settings than its checkpoints': start afresh
        saved = P.from_dict(yaml.safe_load(Path(args["--params"]).read_text()))
        assert saved.train == dataclasses.replace(params.train, seed=seed) and params.train.seed != seed
        assert (saved.data, saved.bpe, saved.model) == (params.data, params.bpe, params.model)
        assert not saved.distill.enabled and not saved.distill.teacher_seeds  # a teacher trains no teachers


def test_distill_translates_with_the_seeded_teachers_after_those_named(tmp_path):
    model = make_trained_model_dir(tmp_path / "model", steps=1, seed=0)
    shutil.copytree(model, tmp_path / "teachers" / "seed2")
    named = D.teacher_dirs(seeds(2), model, tmp_path / "teachers")
    assert named == [(model, "--model"), (tmp_path / "teachers" / "seed2", "distill.teacher_seeds")]


def test_distill_refuses_a_seed_the_teachers_stage_has_not_trained_naming_the_stage(tmp_path):
    (tmp_path / "teachers").mkdir()
    with pytest.raises(UserError, match=r"^distill.teacher_seeds: .*seed3 holds no teacher of seed 3; run"):
        D.teacher_dirs(seeds(3), tmp_path / "model", tmp_path / "teachers")
    with pytest.raises(UserError, match=r"^distill.teacher_seeds: pass --teachers"):
        D.teacher_dirs(seeds(3), tmp_path / "model", None)
