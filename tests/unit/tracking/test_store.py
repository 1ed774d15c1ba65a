"""The store: where runs go."""

from __future__ import annotations

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
