"""mlflow_run.json: written and read back by RunFile, and read leniently where a run is only named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.tracking.run_file import RUN_FILE, RunFile


def test_a_run_file_is_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "model" / RUN_FILE
    RunFile("abc", "sqlite:////x/mlflow.db").write(path)
    assert json.loads(path.read_text()) == {"run_id": "abc", "tracking_uri": "sqlite:////x/mlflow.db"}
    assert RunFile.read(path) == RunFile("abc", "sqlite:////x/mlflow.db")


def test_an_untracked_training_has_an_empty_run_file(tmp_path: Path) -> None:
    RunFile.of({"run_id": None, "tracking_uri": None}).write(tmp_path / RUN_FILE)
    assert json.loads((tmp_path / RUN_FILE).read_text()) == {"run_id": None, "tracking_uri": None}
    assert RunFile.read(tmp_path / RUN_FILE) == RunFile()


def test_a_missing_or_broken_run_file_is_an_error_to_read_and_empty_to_name(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "broken.json").write_text("{not json")
    for name, error in (("missing.json", OSError), ("list.json", ValueError), ("broken.json", ValueError)):
        with pytest.raises(error):
            RunFile.read(tmp_path / name)
        assert RunFile.read_or_empty(tmp_path / name) == RunFile()
