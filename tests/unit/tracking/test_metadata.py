"""What describes a run: its commit, the command that ran, the system, and the manifest it read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.tracking import metadata


def test_git_commit_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert metadata.git_commit(tmp_path) is None


def commit_in(repo: Path, message: str) -> str:
    """A new commit in `repo` (created if need be); its hash."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    repo.mkdir(exist_ok=True)
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message)
    return git("rev-parse", "HEAD")


def test_git_commit_is_the_checkout_a_stage_runs_in_not_dvc_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dvc exp run --queue/--temp: the stage runs in DVC's copy at the experiment's baseline while
    # DVC_ROOT, the workspace, has moved on to newer commits.
    workspace, baseline_copy = tmp_path / "workspace", tmp_path / "copy"
    commit_in(workspace, "newer")
    baseline = commit_in(baseline_copy, "baseline")
    monkeypatch.setenv("DVC_ROOT", str(workspace))
    monkeypatch.chdir(baseline_copy)
    assert metadata.git_commit() == baseline
    assert metadata.run_tags({})["git_commit"] == baseline


def test_system_info_names_device_torch_host_python() -> None:
    info = metadata.system_info("cuda:0")
    assert info["sys.device"] == "cuda:0"
    assert set(info) == {"sys.device", "sys.torch", "sys.torch_threads", "sys.hostname", "sys.python"}
    assert int(info["sys.torch_threads"]) >= 1


def test_source_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DVC_EXP_NAME", "DVC_ROOT"):
        monkeypatch.delenv(name, raising=False)
    argv = ["/repo/pipeline/__main__.py", "train", "--params", "my params.yaml"]
    assert metadata.source_name(argv) == "python -m pipeline train --params 'my params.yaml'"
    monkeypatch.setenv("DVC_ROOT", "/repo")
    assert metadata.source_name(argv) == "dvc repro"
    monkeypatch.setenv("DVC_EXP_NAME", "exp-1")
    assert metadata.source_name(argv) == "dvc exp run"


def test_an_unreadable_manifest_gives_no_datasets_and_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    assert metadata.read_manifest(tmp_path / "manifest.json") is None
    assert metadata.read_manifest(tmp_path / "missing.json") is None
    assert capsys.readouterr().err.count("no dataset inputs") == 2
