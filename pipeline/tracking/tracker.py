"""MLflow tracking that can never take training down: `Tracker`, one run logged best effort.

It talks to MLflow with an explicit run id (`MlflowClient`, no global active
run, so nothing leaks between runs or tests). When MLflow fails (a server that
is down or dies mid-run, a SQLite file locked by parallel runs past a few
retries) the tracker warns once, keeps every record in an offline buffer
(pipeline/tracking/offline.py), retries now and then with growing pauses, and
replays the buffer when MLflow answers again.

A training opens its run with `open_training_run` (its observer, looked up by
name: no code the train stage depends on) and saves it to
`data/model/mlflow_run.json`; score and report reopen that run to add scores,
datasets, the logged model and the report (docs/mlflow.md).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from pipeline.tracking import records, store
from pipeline.tracking.metadata import best_effort, param_strings, run_tags
from pipeline.tracking.offline import OfflineBuffer
from pipeline.tracking.records import Record, Target
from pipeline.tracking.run_file import RunFile
from pipeline.tracking.store import short, tracking_uri, warn


def open_training_run(start: Any) -> Tracker:
    """The MLflow run of a training (pipeline/training/observer.py's RunStart): taken up again if
    the training resumes one, else new; a run whose training state was deleted for this one is
    marked KILLED if it never ended (its process died without a word)."""
    replaced, resumed = start.replaced, start.resumed
    if replaced and replaced.get("run_id"):
        uri = replaced.get("tracking_uri") or tracking_uri()
        Tracker(uri, replaced["run_id"], start.offline_dir, owns_run=True).end_if_running("KILLED")
    if resumed and resumed.get("run_id"):
        uri = resumed.get("tracking_uri") or tracking_uri()
        tracker = Tracker(uri, resumed["run_id"], start.offline_dir, owns_run=True)
        tracker.reopen()  # a run stopped by a signal said KILLED: it is running again
        tracker.start_system_metrics(resume=True)
        return tracker
    experiment = start.params["tracking"]["experiment"]
    tracker = Tracker.start(start.params, experiment, start.run_name, start.tags, start.offline_dir)
    tracker.start_system_metrics()
    return tracker


class Tracker:
    """One MLflow run, logged best effort: no method ever raises into the caller.

    States: online (MLflow answers), offline (records buffered in memory and in
    `<offline_dir>/mlflow_offline.jsonl`, replayed on reconnect), disabled (no
    run: every call is a no-op). Each call becomes a record (pipeline/tracking/records.py).
    """

    def __init__(
        self,
        uri: str | None,
        run_id: str | None,
        offline_dir: Path | None,
        owns_run: bool,
    ) -> None:
        self.tracking_uri = uri
        self._run_id = run_id
        self._offline = OfflineBuffer(offline_dir)
        self._owns_run = owns_run
        self._client: Any = None
        self._state = "disabled" if uri is None else "online"
        self._warned = False
        self._ended = False
        self._monitor: Any = None  # MLflow's SystemMetricsMonitor, while it samples
        # ... and short HTTP retries while it does: its thread calls the server on its own, and with
        # MLflow's (7 retries, backoff to 128 s) a server gone mid-run held up end() by 4 minutes
        self._quick_http = contextlib.ExitStack()

    # --- constructors ---

    @classmethod
    def start(
        cls,
        params: dict[str, Any],
        experiment: str,
        run_name: str,
        tags: dict[str, Any] | None = None,
        offline_dir: str | Path | None = None,
    ) -> Tracker:
        """Open a new run with flattened params and the standard tags; offline if MLflow fails."""
        tracker = cls(tracking_uri(), None, Path(offline_dir) if offline_dir else None, owns_run=True)
        start = {
            "op": "start",
            "experiment": experiment,
            "run_name": run_name,
            "tracking_uri": tracker.tracking_uri,
            "tags": best_effort(lambda: run_tags(params, tags), {}),
            "time_ms": _now_ms(),
        }
        tracker._submit(start)
        tracker._submit({"op": "params", "params": param_strings(params)})
        return tracker

    @classmethod
    def resume(
        cls,
        run_id: str,
        uri: str | None = None,
        offline_dir: str | Path | None = None,
        owns_run: bool = False,
    ) -> Tracker:
        """Reopen an existing run by id to add records; `end` sets its status only if owns_run.

        Score and report add to a finished run (owns_run False); a resumed
        training run owns its run and closes it.
        """
        offline = Path(offline_dir) if offline_dir else None
        tracker = cls(uri or tracking_uri(), run_id, offline, owns_run=owns_run)
        tracker._submit({"op": "check_run"})
        return tracker

    @classmethod
    def from_run_file(cls, path: str | Path, offline_dir: str | Path | None = None) -> Tracker:
        """Resume the run a `mlflow_run.json` names; disabled (silently) when there is none."""
        path = Path(path)
        if not path.is_file():
            return cls.disabled()
        try:
            run = RunFile.read(path)
        except (OSError, ValueError) as e:
            warn(f"MLflow: cannot read {path} ({e}); not logging to its run")
            return cls.disabled()
        if not run.run_id:
            return cls.disabled()
        return cls.resume(run.run_id, run.tracking_uri, offline_dir)

    @classmethod
    def disabled(cls) -> Tracker:
        """A tracker that records nothing (no run to log to)."""
        return cls(None, None, None, owns_run=False)

    # --- what callers use ---

    @property
    def run_id(self) -> str | None:
        return self._run_id

    @property
    def enabled(self) -> bool:
        return self._state != "disabled"

    @property
    def online(self) -> bool:
        return self._state == "online"

    def run_info(self) -> dict[str, str | None]:
        """What `mlflow_run.json` holds, for later stages to resume this run."""
        return {"run_id": self._run_id, "tracking_uri": self.tracking_uri}

    def save_run_file(self, path: str | Path) -> None:
        """Write `run_info()` atomically (the train stage puts it in the model dir)."""
        RunFile.of(self.run_info()).write(path)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        values = {}
        for key, value in metrics.items():
            with contextlib.suppress(TypeError, ValueError):
                values[str(key)] = float(value)
        if values:
            self._submit({"op": "metrics", "step": int(step), "time_ms": _now_ms(), "metrics": values})

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params, nested ({'train': {'lr': ..}}) or flat; nested keys are joined with '.'."""
        self._submit({"op": "params", "params": param_strings(params)})

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._submit({"op": "tags", "tags": {str(k): str(v) for k, v in tags.items()}})

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._submit({"op": "artifact", "path": str(Path(path).resolve()), "artifact_path": artifact_path})

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        path = str(Path(directory).resolve())
        self._submit({"op": "artifacts", "path": path, "artifact_path": artifact_path})

    def log_datasets(self, datasets: list[dict[str, Any]]) -> None:
        """Dataset inputs as `manifest_datasets` describes them."""
        if datasets:
            self._submit({"op": "datasets", "datasets": datasets})

    def log_model(self, name: str, spec: dict[str, Any], register_as: str | None = None) -> None:
        """Log an MLflow pyfunc model (`spec`: mlflow.pyfunc.log_model's arguments) as this run's
        output, and register it as a new version of `register_as` if given."""
        self._submit({"op": "model", "name": name, "spec": spec, "register_as": register_as})

    def start_system_metrics(self, resume: bool = False) -> None:
        """Sample CPU, memory, disk, network (and GPUs with nvidia-ml-py) into `system/*` until end().

        Every MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL seconds (MLflow's default: 10); `resume`
        continues the steps of an earlier session of this run.
        """
        if not self.online or self._run_id is None or self._monitor is not None:
            return
        self._quick_http.enter_context(store.quick_http())
        try:
            self._monitor = store.start_system_metrics(self._uri(), self._run_id, resume)
        except Exception as e:  # noqa: BLE001 - system metrics are a nicety: without them training goes on
            warn(f"MLflow: no system metrics ({short(e)})")

    def end(self, status: str = "FINISHED") -> None:
        """Close the run (FINISHED, FAILED or KILLED); a resumed run keeps its own status."""
        if self._ended:
            return
        self._ended = True
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.finish()  # stops the sampling thread and flushes its last batch
            self._monitor = None
        self._quick_http.close()
        if self._owns_run:
            self._submit({"op": "end", "status": status, "time_ms": _now_ms()})
        if self._state == "offline":
            self._offline.try_now()  # one last try to sync what is buffered
            self._try_reconnect()

    def reopen(self) -> None:
        """Mark the run RUNNING again: a training resumes it (after a signal ended it as KILLED)."""
        if self._owns_run:
            self._submit({"op": "status", "status": "RUNNING"})

    def end_if_running(self, status: str = "KILLED") -> None:
        """Close the run as `status` if it is still RUNNING (its process died without a word)."""
        if self._owns_run:
            self._submit({"op": "end_if_running", "status": status, "time_ms": _now_ms()})
        self._ended = True

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if kind is None:
            self.end("FINISHED")
        else:
            self.end("KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED")

    # --- machinery ---

    def _submit(self, record: Record) -> None:
        """Apply a record now, or buffer it; never raises."""
        if self._state == "disabled":
            return
        try:
            if self._state == "online":
                try:
                    self._apply(record)
                    return
                except Exception as e:  # noqa: BLE001 - any failure of the store: refused record or offline
                    if self._refused(record, e):
                        return
                    self._go_offline(e)
            self._offline.hold(record)
            self._try_reconnect()
        except Exception as e:  # noqa: BLE001 - tracking must never stop training: disable it instead
            self._state = "disabled"
            warn(f"MLflow tracking disabled after an unexpected error: {short(e)}")

    def _apply(self, record: Record) -> None:
        uri = self._uri()
        with store.quick_http():
            if self._client is None:
                self._client = store.with_lock_retries(lambda: store.make_client(uri))
            to = Target(self._client, uri, self._run_id)
            store.with_lock_retries(lambda: records.apply(to, record))
            self._run_id = to.run_id  # a start record made the run

    def _uri(self) -> str:
        """The tracking URI of a tracker that applies records; only a disabled one has none."""
        assert self.tracking_uri is not None, "a tracker without a URI is disabled and applies nothing"
        return self.tracking_uri

    def _refused(self, record: Record, error: Exception) -> bool:
        """True if MLflow answered but refused: retrying cannot help, so say so and move on."""
        refusal = records.refusal(record, error, self._run_id, self.tracking_uri)
        if refusal is None:
            return False
        if refusal.run_missing:
            self._state = "disabled"
        warn(refusal.message)
        return True

    def _go_offline(self, error: Exception) -> None:
        self._state = "offline"
        self._offline.wait()
        if self._offline.file is not None and self._run_id is not None:
            self._offline.note({"op": "resume", "run_id": self._run_id, "tracking_uri": self.tracking_uri})
        if not self._warned:
            self._warned = True
            if self._offline.file is not None:
                kept = f"metrics are kept in {self._offline.file} and synced if it comes back"
            else:
                kept = "records are held in memory and sent if it comes back before this process ends"
            warn(f"Warning: MLflow tracking at {self.tracking_uri} failed ({store.reason(error)}); {kept}")

    def _try_reconnect(self) -> None:
        """Replay the buffer if the pause has passed; on failure double the pause."""
        if self._state != "offline" or not self._offline.due():
            return
        synced = 0
        pending = self._offline.pending
        try:
            while pending:
                record = pending[0]
                try:
                    self._apply(record)
                except Exception as e:
                    if not self._refused(record, e):
                        raise
                    if self._state == "disabled":
                        return
                pending.pop(0)
                synced += 1
        except Exception:  # noqa: BLE001 - still unreachable, whatever the error: back off and retry later
            self._offline.back_off()
            return
        self._state = "online"
        self._offline.synced()
        self._offline.note({"op": "synced", "run_id": self._run_id, "records": synced})
        warn(f"MLflow tracking at {self.tracking_uri} is back; synced {synced} buffered records")


def _now_ms() -> int:
    return int(time.time() * 1000)
