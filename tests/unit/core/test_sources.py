"""dvc.yaml's deps list the code each stage runs, so `dvc repro` re-runs a stage when it changes."""

from __future__ import annotations

import yaml

from pipeline.stage import module_closure
from tests.conftest import REPO


def _stage_module(cmd: str) -> str:
    return "pipeline." + cmd.split("python -m pipeline ", 1)[1].split()[0].replace("-", "_")


def test_module_closure_follows_imports_transitively():
    files = {p.name for p in module_closure("pipeline.train")}
    # train imports model, which imports attention, which imports dropout
    assert {"train.py", "model.py", "attention.py", "dropout.py", "loss.py"} <= files
    assert "report.py" not in files and "__init__.py" not in files  # neither imported by train


def test_every_stage_depends_on_all_the_code_it_imports():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert {"download", "clean", "bpe", "binarize", "train", "decode", "score", "report"} <= set(stages)
    for name, stage in stages.items():
        needed = {p.relative_to(REPO).as_posix() for p in module_closure(_stage_module(stage["cmd"]))}
        listed = {d for d in stage["deps"] if isinstance(d, str)}
        assert needed <= listed, f"dvc.yaml stage {name} lacks deps {sorted(needed - listed)}"
