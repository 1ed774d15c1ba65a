"""The store: where runs go, and MLflow's process-wide tracking URI put back after a call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.tracking import store


def test_default_uri_is_absolute_sqlite_under_dvc_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert store.tracking_uri() == f"sqlite:///{tmp_path}/mlflow.db"
    assert store.tracking_uri().startswith("sqlite:////")
    monkeypatch.delenv("DVC_ROOT")
    monkeypatch.chdir(tmp_path)
    assert store.tracking_uri() == f"sqlite:///{tmp_path.resolve()}/mlflow.db"


def test_env_uri_wins_and_relative_sqlite_is_anchored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert store.tracking_uri() == "http://mlflow.example:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///runs/m.db")
    assert store.tracking_uri() == f"sqlite:///{tmp_path}/runs/m.db"


def test_global_tracking_uri_is_set_for_the_call_then_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    inside = f"sqlite:///{tmp_path / 'inside.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////users/own.db")
    with store.global_tracking_uri(inside):
        assert mlflow.get_tracking_uri() == inside
    # The user's variable is back and no setting pins it: a later change of the variable is seen.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////users/other.db")
    assert mlflow.get_tracking_uri() == "sqlite:////users/other.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with store.global_tracking_uri(inside):
        pass
    assert "MLFLOW_TRACKING_URI" not in os.environ and not mlflow.is_tracking_uri_set()
