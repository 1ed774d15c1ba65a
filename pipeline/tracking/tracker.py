"""MLflow tracking that can never take training down.

Every call goes through `Tracker`, which talks to MLflow with an explicit run
id (`MlflowClient`, no global active run, so nothing leaks between runs or
tests). When MLflow fails (a server that is down or dies mid-run, a SQLite
file locked by parallel runs past a few retries) the tracker warns once, keeps
every record in `mlflow_offline.jsonl` in a local directory, retries now and
then with growing pauses, and replays the buffer when MLflow answers again.

A training opens its run with `open_training_run` (its observer, looked up by
name: no code the train stage depends on) and saves it to
`data/model/mlflow_run.json`; score and report reopen that run to add scores,
datasets, the logged model and the report (docs/mlflow.md).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import logging
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline import params as P

OFFLINE_FILE = "mlflow_offline.jsonl"
RUN_FILE = "mlflow_run.json"

# MLflow's HTTP client retries 7 times with backoff (minutes) and waits 120 s
# per request; here a dead server must cost seconds. A user's own setting wins.
QUICK_HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}
LOCK_RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0)  # on top of SQLite's own 5 s busy wait
RETRY_SECONDS = (15.0, 300.0)  # offline: first pause before retrying MLflow, and the cap as it doubles
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000

# MLflow 3 opens an experiment in its model-training view with this tag (else it guesses, and an
# experiment without traces may open in the GenAI view). Values: the UI's ExperimentKind.
KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
DIGEST_CHARS = 16  # MLflow stores a dataset digest in 36 characters; the full sums go in the profile
SPLIT_CONTEXT = {"train": "training", "val": "validation", "test": "testing"}  # mlflow.data.context

# MLflow's answer to a request it refuses (a param logged again with another
# value, a finished run's state): retrying cannot help, so the record is dropped.
REFUSED = {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST", "INVALID_STATE"}


# --- where runs go and what describes them -----------------------------------


def project_root() -> Path:
    """DVC_ROOT (set by DVC in every stage, also for --temp/--queue runs), else the cwd."""
    return Path(os.environ.get("DVC_ROOT") or Path.cwd()).resolve()


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else an absolute sqlite:///<root>/mlflow.db."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if not uri:
        return f"sqlite:///{project_root() / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        # A relative SQLite path would land in DVC's throwaway copy of the repo.
        return f"sqlite:///{project_root() / uri.removeprefix('sqlite:///')}"
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:////abs/path URI; None for any other store."""
    if uri.startswith("sqlite:////"):
        return Path(uri.removeprefix("sqlite:///"))
    return None


def git_commit(cwd: Path | None = None) -> str | None:
    """HEAD's commit hash in `cwd` (default: the working directory), or None outside a git checkout.

    Not DVC_ROOT's: a --queue/--temp experiment runs in DVC's copy of the repository at the
    experiment's baseline, while the workspace's HEAD may have moved on since it was queued.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def system_info(device: str | None = None) -> dict[str, str]:
    """Where a run ran: device, torch version and threads, host, python."""
    import torch  # imported here: score and report reopen runs without needing torch

    if device is None:
        device = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
    return {
        "sys.device": device,
        "sys.torch": torch.__version__,
        "sys.torch_threads": str(torch.get_num_threads()),
        "sys.hostname": socket.gethostname(),
        "sys.python": platform.python_version(),
    }


def source_name(argv: list[str] | None = None) -> str:
    """The command that ran, as the run page's Source: `dvc exp run`, `dvc repro`, or the command line."""
    if os.environ.get("DVC_EXP_NAME"):
        return "dvc exp run"
    if os.environ.get("DVC_ROOT"):
        return "dvc repro"
    argv = sys.argv if argv is None else argv
    if argv and Path(argv[0]).parts[-2:] == ("pipeline", "__main__.py"):
        return shlex.join(["python", "-m", "pipeline", *argv[1:]])
    return shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else "python"


def run_tags(params: dict[str, Any], tags: dict[str, Any] | None = None) -> dict[str, str]:
    """Git commit, source, DVC experiment name, corpus and pair, system info, then the caller's tags."""
    out = dict(system_info())
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
        out["mlflow.source.git.commit"] = commit  # shown by the MLflow UI
    out["mlflow.source.name"] = source_name()
    out["mlflow.source.type"] = "LOCAL"
    out["mlflow.user"] = _safe(getpass.getuser, "")
    if os.environ.get("DVC_EXP_NAME"):
        out["dvc_exp"] = os.environ["DVC_EXP_NAME"]
    data = params.get("data", {})
    if isinstance(data.get("train"), (list, tuple)) and data["train"]:
        out["corpus"] = ",".join(str(name) for name in data["train"])
    if "src_lang" in data and "tgt_lang" in data:
        out["pair"] = f"{data['src_lang']}-{data['tgt_lang']}"
    out.update({k: str(v) for k, v in (tags or {}).items()})
    return out


def read_manifest(path: str | Path) -> dict[str, Any] | None:
    """The download stage's manifest.json, or None (with a warning) when it cannot be read."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        _warn(f"MLflow: cannot read {path} ({_short(e)}); the run gets no dataset inputs")
        return None
    return manifest if isinstance(manifest, dict) else None


def manifest_datasets(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Each corpus source of the manifest's train, val and test splits as an MLflow dataset input.

    Named after the source; digest: the first DIGEST_CHARS hex digits of the sha256 of its
    files' `role:sha256` lines (the full sums are in the profile); source: its URLs or paths.
    """
    columns = [{"type": "string", "name": str(manifest.get(k, k))} for k in ("src_lang", "tgt_lang")]
    datasets = []
    for split, context in SPLIT_CONTEXT.items():
        for entry in (manifest.get("splits") or {}).get(split) or []:
            files = entry.get("files") or []
            sums = "\n".join(f"{f.get('role')}:{f.get('sha256')}" for f in files)
            urls = [f"{f.get('source')}" + (f"#{f['member']}" if f.get("member") else "") for f in files]
            remote = bool(urls) and all(u.startswith(("http://", "https://")) for u in urls)
            profile = {"split": split, "lines": entry.get("lines")}
            profile["sha256"] = {str(f.get("role")): f.get("sha256") for f in files}
            datasets.append(
                {
                    "name": str(entry.get("name")),
                    "digest": hashlib.sha256(sums.encode()).hexdigest()[:DIGEST_CHARS],
                    "source_type": "http" if remote else "local",
                    "source": json.dumps({"urls": urls}),
                    "schema": json.dumps({"mlflow_colspec": columns}),
                    "profile": json.dumps(profile),
                    "context": context,
                }
            )
    return datasets


# --- a training's run ---------------------------------------------------------------


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


# --- the tracker ----------------------------------------------------------------


class Tracker:
    """One MLflow run, logged best effort: no method ever raises into the caller.

    States: online (MLflow answers), offline (records buffered in memory and in
    `<offline_dir>/mlflow_offline.jsonl`, replayed on reconnect), disabled (no
    run: every call is a no-op).
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
        self._offline_file = Path(offline_dir) / OFFLINE_FILE if offline_dir is not None else None
        self._owns_run = owns_run
        self._client: Any = None
        self._state = "disabled" if uri is None else "online"
        self._pending: list[dict[str, Any]] = []
        self._warned = False
        self._pause_s = RETRY_SECONDS[0]
        self._next_try = 0.0
        self._ended = False
        self._monitor: Any = None  # MLflow's SystemMetricsMonitor, while it samples

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
            "tags": _safe(lambda: run_tags(params, tags), {}),
            "time_ms": _now_ms(),
        }
        tracker._submit(start)
        tracker._submit({"op": "params", "params": _param_strings(params)})
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
            info = json.loads(path.read_text(encoding="utf-8"))
            run_id, uri = info.get("run_id"), info.get("tracking_uri")
        except (OSError, ValueError, AttributeError) as e:
            _warn(f"MLflow: cannot read {path} ({e}); not logging to its run")
            return cls.disabled()
        if not run_id:
            return cls.disabled()
        return cls.resume(str(run_id), uri, offline_dir)

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

    @property
    def offline_file(self) -> Path | None:
        return self._offline_file

    def run_info(self) -> dict[str, str | None]:
        """What `mlflow_run.json` holds, for later stages to resume this run."""
        return {"run_id": self._run_id, "tracking_uri": self.tracking_uri}

    def save_run_file(self, path: str | Path) -> None:
        """Write `run_info()` atomically (the train stage puts it in the model dir)."""
        files.write_json(path, self.run_info())

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        values = {}
        for key, value in metrics.items():
            with contextlib.suppress(TypeError, ValueError):
                values[str(key)] = float(value)
        if values:
            self._submit({"op": "metrics", "step": int(step), "time_ms": _now_ms(), "metrics": values})

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params, nested ({'train': {'lr': ..}}) or flat; nested keys are joined with '.'."""
        self._submit({"op": "params", "params": _param_strings(params)})

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
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            with _quick_http():
                monitor = SystemMetricsMonitor(self._run_id, resume_logging=resume, tracking_uri=self._uri())
            monitor.start()
            self._monitor = monitor
        except Exception as e:  # noqa: BLE001 - system metrics are a nicety: without them training goes on
            _warn(f"MLflow: no system metrics ({_short(e)})")

    def end(self, status: str = "FINISHED") -> None:
        """Close the run (FINISHED, FAILED or KILLED); a resumed run keeps its own status."""
        if self._ended:
            return
        self._ended = True
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.finish()  # stops the sampling thread and flushes its last batch
            self._monitor = None
        if self._owns_run:
            self._submit({"op": "end", "status": status, "time_ms": _now_ms()})
        if self._state == "offline":
            self._next_try = 0.0  # one last try to sync what is buffered
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

    def _submit(self, record: dict[str, Any]) -> None:
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
            self._buffer(record)
            self._try_reconnect()
        except Exception as e:  # noqa: BLE001 - tracking must never stop training: disable it instead
            self._state = "disabled"
            _warn(f"MLflow tracking disabled after an unexpected error: {_short(e)}")

    def _apply(self, record: dict[str, Any]) -> None:
        uri = self._uri()
        with _quick_http():
            if self._client is None:
                self._client = _with_lock_retries(lambda: _make_client(uri))
            _with_lock_retries(lambda: self._apply_record(record))

    def _uri(self) -> str:
        """The tracking URI of a tracker that applies records; only a disabled one has none."""
        assert self.tracking_uri is not None, "a tracker without a URI is disabled and applies nothing"
        return self.tracking_uri

    def _apply_record(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client, op = self._client, record["op"]
        if op == "start":
            self._run_id = _create_run(client, self._uri(), record)
        elif op == "check_run":
            client.get_run(self._run_id)
        elif op == "metrics":
            step, ms = record["step"], record["time_ms"]
            metrics = [Metric(k, v, ms, step) for k, v in record["metrics"].items()]
            for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
                client.log_batch(self._run_id, metrics=chunk, synchronous=True)
        elif op == "params":
            params = [Param(k, v) for k, v in record["params"].items()]
            for chunk in _chunks(params, MAX_PARAMS_PER_BATCH):
                client.log_batch(self._run_id, params=chunk, synchronous=True)
        elif op == "tags":
            tags = [RunTag(k, v) for k, v in record["tags"].items()]
            for chunk in _chunks(tags, MAX_PARAMS_PER_BATCH):
                client.log_batch(self._run_id, tags=chunk, synchronous=True)
        elif op == "artifact":
            if Path(record["path"]).is_file():
                client.log_artifact(self._run_id, record["path"], record["artifact_path"])
        elif op == "artifacts":
            if Path(record["path"]).is_dir():
                client.log_artifacts(self._run_id, record["path"], record["artifact_path"])
        elif op == "datasets":
            client.log_inputs(self._run_id, datasets=_dataset_inputs(record["datasets"]))
        elif op == "model":
            _log_model(self._uri(), self._run_id, record)
        elif op == "end":
            client.set_terminated(self._run_id, record["status"], end_time=record["time_ms"])
        elif op == "status":
            client.update_run(self._run_id, status=record["status"])
        elif op == "end_if_running":
            if client.get_run(self._run_id).info.status == "RUNNING":
                client.set_terminated(self._run_id, record["status"], end_time=record["time_ms"])
        else:
            raise ValueError(f"unknown tracking record {op!r}")

    def _refused(self, record: dict[str, Any], error: Exception) -> bool:
        """True if MLflow answered but refused: retrying cannot help, so say so and move on."""
        code = getattr(error, "error_code", None)
        if code == "RESOURCE_DOES_NOT_EXIST":
            self._state = "disabled"
            _warn(f"MLflow: run {self._run_id} not found at {self.tracking_uri}; not logging to it")
            return True
        if code in REFUSED and "locked" not in str(error):
            _warn(f"MLflow refused a {record['op']} record ({_short(error)}); skipped")
            return True
        if record["op"] in ("model", "datasets") and not _unreachable(error):
            # not the store being away: retrying would fail the same way and hold up every later record
            _warn(f"MLflow: could not log the {record['op']} ({_short(error)}); skipped")
            return True
        return False

    def _go_offline(self, error: Exception) -> None:
        self._state = "offline"
        self._next_try = time.monotonic() + self._pause_s
        if self._offline_file is not None and self._run_id is not None:
            self._write_offline({"op": "resume", "run_id": self._run_id, "tracking_uri": self.tracking_uri})
        if not self._warned:
            self._warned = True
            if self._offline_file is not None:
                kept = f"metrics are kept in {self._offline_file} and synced if it comes back"
            else:
                kept = "records are held in memory and sent if it comes back before this process ends"
            _warn(f"Warning: MLflow tracking at {self.tracking_uri} failed ({_reason(error)}); {kept}")

    def _buffer(self, record: dict[str, Any]) -> None:
        self._pending.append(record)
        self._write_offline(record)

    def _write_offline(self, record: dict[str, Any]) -> None:
        if self._offline_file is None:
            return
        try:
            self._offline_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self._offline_file, "a", encoding="utf-8") as f:
                # default=repr: a model record holds objects (the python model, its signature)
                f.write(json.dumps(record, ensure_ascii=False, default=repr) + "\n")
        except OSError:
            pass  # a full disk must not stop training; the records stay in memory

    def _try_reconnect(self) -> None:
        """Replay the buffer if the pause has passed; on failure double the pause."""
        if self._state != "offline" or time.monotonic() < self._next_try:
            return
        synced = 0
        try:
            while self._pending:
                record = self._pending[0]
                try:
                    self._apply(record)
                except Exception as e:
                    if not self._refused(record, e):
                        raise
                    if self._state == "disabled":
                        return
                self._pending.pop(0)
                synced += 1
        except Exception:  # noqa: BLE001 - still unreachable, whatever the error: back off and retry later
            self._pause_s = min(self._pause_s * 2, RETRY_SECONDS[1])
            self._next_try = time.monotonic() + self._pause_s
            return
        self._state = "online"
        self._pause_s = RETRY_SECONDS[0]
        self._write_offline({"op": "synced", "run_id": self._run_id, "records": synced})
        _warn(f"MLflow tracking at {self.tracking_uri} is back; synced {synced} buffered records")


# --- helpers ---------------------------------------------------------------------


def _make_client(uri: str) -> Any:
    """An MlflowClient; SQLite's first-use schema creation is serialised across processes."""
    from mlflow import MlflowClient

    with _init_lock(uri):
        return MlflowClient(tracking_uri=uri)


def _create_run(client: Any, uri: str, record: dict[str, Any]) -> str:
    """Create (or find) the experiment, then the run; returns its id."""
    name = record["experiment"]
    with _init_lock(uri):
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            db = sqlite_path(uri)
            # MLflow's default artifact root is ./mlruns of whatever cwd made the
            # database: keep artifacts beside the database instead.
            location = (db.parent / "mlartifacts").as_uri() if db else None
            kind = {KIND_TAG: TRAINING_KIND}
            experiment_id = client.create_experiment(name, artifact_location=location, tags=kind)
        else:
            experiment_id = experiment.experiment_id
            kind = experiment.tags.get(KIND_TAG, "")
            if not kind or kind.endswith("_inferred") or kind == "no_inferred_type":
                # unset, or the UI's guess: a run of this pipeline says what the experiment is
                client.set_experiment_tag(experiment_id, KIND_TAG, TRAINING_KIND)
    run = client.create_run(
        experiment_id, start_time=record["time_ms"], tags=record["tags"], run_name=record["run_name"]
    )
    return run.info.run_id


def _dataset_inputs(datasets: list[dict[str, Any]]) -> list[Any]:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    fields = ("name", "digest", "source_type", "source", "schema", "profile")
    return [
        DatasetInput(Dataset(**{k: d[k] for k in fields}), [InputTag("mlflow.data.context", d["context"])])
        for d in datasets
    ]


def _log_model(uri: str, run_id: str | None, record: dict[str, Any]) -> None:
    """mlflow.pyfunc.log_model for the run `run_id` (Model.log: pyfunc's own takes no run id)."""
    import mlflow
    from mlflow.models import Model

    experiment_id = _make_client(uri).get_run(run_id).info.experiment_id
    with _fluent_context(uri, experiment_id):
        Model.log(
            artifact_path=None,
            name=record["name"],
            flavor=mlflow.pyfunc,
            run_id=run_id,
            registered_model_name=record["register_as"],
            await_registration_for=0,  # a new version of a local or OSS registry is ready at once
            **record["spec"],
        )


@contextlib.contextmanager
def _fluent_context(uri: str, experiment_id: str) -> Iterator[None]:
    """MLflow's global tracking URI and experiment (which Model.log reads: the logged model goes to the
    run's experiment) set for a call, then restored, with the variables MLflow's setters change."""
    from mlflow.tracking import fluent
    from mlflow.tracking._tracking_service import utils

    names = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID")
    saved_uri: Any = utils._tracking_uri  # None when unset: MLflow's setter takes None back
    saved_experiment: Any = fluent._active_experiment_id
    saved_env = {k: os.environ.get(k) for k in names}
    utils.set_tracking_uri(uri)
    fluent._active_experiment_id = experiment_id  # type: ignore[assignment]  # typed None in MLflow
    try:
        yield
    finally:
        utils.set_tracking_uri(saved_uri)
        fluent._active_experiment_id = saved_experiment
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _init_lock(uri: str) -> Iterator[None]:
    """Serialise creating a SQLite database and experiment between processes (else they race)."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    import fcntl

    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}-init.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _quick_http() -> Iterator[None]:
    """Short MLflow HTTP retries and quiet urllib3 retry warnings, for our calls only."""
    saved = {k: os.environ.get(k) for k in QUICK_HTTP_ENV}
    for key, value in QUICK_HTTP_ENV.items():
        os.environ.setdefault(key, value)
    pool_logger = logging.getLogger("urllib3.connectionpool")
    level = pool_logger.level
    pool_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pool_logger.setLevel(level)
        for key, before in saved.items():
            if before is None:
                os.environ.pop(key, None)


def _with_lock_retries(call: Any) -> Any:
    """Run `call`, retrying with short pauses while SQLite says the database is locked."""
    for delay in LOCK_RETRY_DELAYS_S:
        try:
            return call()
        except Exception as e:
            if "database is locked" not in str(e) and "database table is locked" not in str(e):
                raise
            time.sleep(delay)
    return call()


def _param_strings(params: dict[str, Any]) -> dict[str, str]:
    return {k: str(v)[:MAX_PARAM_CHARS] for k, v in P.flatten(params).items()}


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _short(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _reason(error: Exception) -> str:
    """Why MLflow failed, in a few words: the network cause if there is one."""
    import requests

    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, requests.exceptions.Timeout):
            return "the server did not answer in time"
        if isinstance(cause, requests.exceptions.ConnectionError):
            return "cannot connect to the server"
        cause = cause.__cause__ or cause.__context__
    return _short(error)


def _unreachable(error: BaseException) -> bool:
    """True if the store could not be reached (network, a locked SQLite file), not refused the call."""
    import requests

    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, (requests.exceptions.RequestException, ConnectionError, TimeoutError)):
            return True
        if "database is locked" in str(cause) or "unable to open database" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _safe(make: Any, default: Any) -> Any:
    try:
        return make()
    except Exception:  # noqa: BLE001 - best-effort system info: any failure gives the default
        return default


def _warn(message: str) -> None:
    click.echo(message, err=True)
