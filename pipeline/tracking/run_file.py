"""mlflow_run.json: the MLflow run a model directory was trained in.

The training writes it beside the model; score, report and export-hf read it
to log to that run or to name it, and the tracker writes it for a run it
started. Plain JSON so that this module imports nothing of MLflow: the
training depends on it, and on nothing else of pipeline/tracking.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline import files

RUN_FILE = "mlflow_run.json"


@dataclass(frozen=True)
class RunFile:
    """A run id and the tracking URI of its store; both None for a training that was not tracked."""

    run_id: str | None = None
    tracking_uri: str | None = None

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> RunFile:
        """From a mapping with `run_id` and `tracking_uri` (an observer's run_info()); empty values: None."""
        run_id, uri = info.get("run_id"), info.get("tracking_uri")
        return cls(str(run_id) if run_id else None, str(uri) if uri else None)

    @classmethod
    def read(cls, path: str | Path) -> RunFile:
        """The run file at `path`; OSError if it cannot be read, ValueError if it holds no run file."""
        found = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(found, dict):
            raise ValueError(f"a JSON object was expected, not {type(found).__name__}")
        return cls.of(found)

    @classmethod
    def read_or_empty(cls, path: str | Path) -> RunFile:
        """The run file at `path`, or an empty one if it is missing or unreadable (for what only names it)."""
        try:
            return cls.read(path)
        except (OSError, ValueError):
            return cls()

    def write(self, path: str | Path) -> None:
        """Write it atomically."""
        files.write_json(path, asdict(self))
