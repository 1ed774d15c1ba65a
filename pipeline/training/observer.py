"""What watches a training without changing it: the MLflow run, or nothing.

The trainer reports to an `Observer` (metrics as they come, its logs at the
end) and never reads anything back, so what watches cannot change a number:
a run with and without tracking ends with the same weights
(tests/system/test_mlflow.py). The MLflow observer (pipeline/tracking/tracker.py) is
looked up by name, not imported, so that MLflow code is no part of the code a
training runs: dvc.yaml's train stage does not list it and the resume
fingerprint does not cover it, and an edit to it retrains nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

MLFLOW = "pipeline.tracking.tracker"  # its open_training_run(RunStart) -> Observer


class Observer(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None: ...
    def run_info(self) -> dict[str, str | None]: ...
    def __enter__(self) -> Observer: ...
    def __exit__(self, kind: Any, error: Any, tb: Any) -> None: ...


@dataclass(frozen=True)
class RunStart:
    """What the MLflow run of a training is opened with (plain values: the tracker imports no training)."""

    params: dict[str, Any]
    run_name: str
    tags: dict[str, Any]
    offline_dir: Path
    resumed: dict[str, str | None] | None = None  # the run a resumed training state recorded
    replaced: dict[str, str | None] | None = field(default=None)  # the run of a state deleted for this one


class Quiet:
    """Watches nothing: tracking is off, or this is not the main process."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        pass

    def run_info(self) -> dict[str, str | None]:
        return {"run_id": None, "tracking_uri": None}

    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        pass


def mlflow_run(start: RunStart) -> Observer:
    """The training's MLflow run, opened (or taken up again) by pipeline/tracking/tracker.py."""
    opened: Observer = importlib.import_module(MLFLOW).open_training_run(start)
    return opened
