"""What a tracker keeps while MLflow is away: the records not yet applied, in memory and as lines of
`mlflow_offline.jsonl`, and when to try the store again (pauses that double up to a cap)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.tracking.records import Record

OFFLINE_FILE = "mlflow_offline.jsonl"
RETRY_SECONDS = (15.0, 300.0)  # offline: first pause before retrying MLflow, and the cap as it doubles


class OfflineBuffer:
    """Records waiting for MLflow, oldest first, and the retry schedule."""

    def __init__(self, directory: Path | None) -> None:
        self.file = Path(directory) / OFFLINE_FILE if directory is not None else None
        self.pending: list[Record] = []
        self._pause_s = RETRY_SECONDS[0]
        self._next_try = 0.0

    def hold(self, record: Record) -> None:
        """Keep `record` for replay, in memory and in the file."""
        self.pending.append(record)
        self.note(record)

    def note(self, record: Record) -> None:
        """Append `record` to the file only (what happened: went offline, synced); never raises."""
        if self.file is None:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.file, "a", encoding="utf-8") as f:
                # default=repr: a model record holds objects (its signature)
                f.write(json.dumps(record, ensure_ascii=False, default=repr) + "\n")
        except OSError:
            pass  # a full disk must not stop training; the records stay in memory

    def wait(self) -> None:
        """Try again after the current pause (the store just failed)."""
        self._next_try = time.monotonic() + self._pause_s

    def due(self) -> bool:
        return time.monotonic() >= self._next_try

    def back_off(self) -> None:
        """The retry failed: double the pause, up to the cap."""
        self._pause_s = min(self._pause_s * 2, RETRY_SECONDS[1])
        self.wait()

    def synced(self) -> None:
        """Everything was replayed: the next failure starts from the first pause again."""
        self._pause_s = RETRY_SECONDS[0]

    def try_now(self) -> None:
        self._next_try = 0.0
