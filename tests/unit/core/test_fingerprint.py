"""dvc.yaml's deps list exactly the code each stage runs, and the code fingerprint is keyed by path."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest
import yaml

from pipeline import fingerprint as fp
from pipeline.fingerprint import PACKAGE, fingerprint, module_closure
from tests.support.repo import REPO


def _stage_module(cmd: str) -> str:
    return "pipeline.stages." + cmd.split("python -m pipeline ", 1)[1].split()[0].replace("-", "_")


def _expand(deps: list[str]) -> set[str]:
    """dvc.yaml's code deps under pipeline/, a folder standing for the .py files in it."""
    out = set()
    for dep in deps:
        path = REPO / dep
        if not dep.startswith("pipeline") or path.suffix not in (".py", ""):
            continue  # data, and data shipped in the package (checked by the test below)
        out |= {p.relative_to(REPO).as_posix() for p in path.glob("*.py")} if path.is_dir() else {dep}
    return out


def _package_data(module_files: list) -> set[str]:
    """The package's data files (not .py) that these modules name, e.g. data/catalog.yaml."""
    data = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    texts = [f.read_text(encoding="utf-8") for f in module_files]
    return {p.relative_to(REPO).as_posix() for p in data if any(f'"{p.name}"' in t for t in texts)}


def test_closure_follows_imports_and_counts_the_packages_init_files():
    files = {p.relative_to(PACKAGE).as_posix() for p in module_closure("pipeline.stages.train")}
    # train imports the transformer, which imports attention, which imports dropout
    assert {"stages/train.py", "model/transformer.py", "model/attention.py", "model/dropout.py"} <= files
    # importing pipeline.model.attention runs pipeline/__init__.py and pipeline/model/__init__.py
    assert {"__init__.py", "model/__init__.py", "training/__init__.py"} <= files
    assert "stages/report.py" not in files and "interop/ct2.py" not in files


def test_a_pipeline_name_that_is_no_module_fails_loudly():
    with pytest.raises(ValueError, match=r"pipeline.nonexistent"):
        module_closure("pipeline.nonexistent")


def test_every_stage_depends_on_exactly_the_code_it_imports():
    """No dep missing (a change would not rerun the stage), none extra (a change would rerun it for
    nothing: a change to the CTranslate2 backend must not rerun decode, nor the report rerun training)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert {"download", "clean", "bpe", "binarize", "train", "decode", "score", "report"} <= set(stages)
    for name, stage in stages.items():
        module = _stage_module(stage["cmd"])
        runs = [module, *(f"pipeline.stages.{s}" for s in getattr(import_module(module), "RUNS", ()))]
        needed = {p.relative_to(REPO).as_posix() for m in runs for p in module_closure(m)}
        listed = _expand([d for d in stage["deps"] if isinstance(d, str)])
        assert needed <= listed, f"dvc.yaml stage {name} lacks deps {sorted(needed - listed)}"
        assert listed <= needed, (
            f"dvc.yaml stage {name} lists code it does not run: {sorted(listed - needed)}"
        )


def test_decode_and_report_do_not_run_the_ctranslate2_backend_and_training_not_the_report():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert "pipeline/interop/ct2.py" not in _expand(stages["decode"]["deps"])
    assert "pipeline/interop/ct2.py" not in _expand(stages["report"]["deps"])
    assert not any("report" in dep for dep in _expand(stages["train"]["deps"]))


def test_fingerprint_keys_are_paths_in_the_package_so_init_files_cannot_collide():
    keys = fingerprint("pipeline.stages.train")
    assert {"__init__.py", "model/__init__.py", "training/__init__.py"} <= set(keys)
    assert all(len(v) == 64 for v in keys.values())


def test_module_file_maps_packages_to_their_init(tmp_path):
    assert fp.module_file("pipeline.model") == PACKAGE / "model" / "__init__.py"
    assert fp.module_file("pipeline.model.attention") == PACKAGE / "model" / "attention.py"
    assert fp.module_file("pipeline.model.attention.MultiHeadAttention") is None


def test_every_stage_depends_on_the_package_data_its_code_reads():
    """A data file shipped in the package (the corpus catalog) is a dep of the stages whose code names
    it, so that a changed URL or sum reruns the download; and no stage lists data it does not read."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert "pipeline/data/catalog.yaml" in stages["download"]["deps"]
    for name, stage in stages.items():
        needed = _package_data(module_closure(_stage_module(stage["cmd"])))
        listed = {d for d in stage["deps"] if d.startswith("pipeline/") and Path(d).suffix not in (".py", "")}
        assert needed == listed, (
            f"dvc.yaml stage {name}: package data read {sorted(needed)}, listed {sorted(listed)}"
        )
