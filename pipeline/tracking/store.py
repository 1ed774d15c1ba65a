"""The MLflow store, reached through MLflow's public API only.

Where it is (`tracking_uri`), a client that waits out a SQLite file locked by
parallel runs and gives up on a dead server in seconds, the calls that create
a run and log a model, and what the store's errors mean in a line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from pipeline.files import project_root

# MLflow's HTTP client retries 7 times with backoff (minutes) and waits 120 s
# per request; here a dead server must cost seconds. A user's own setting wins.
QUICK_HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}
LOCK_RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0)  # on top of SQLite's own 5 s busy wait

# What an experiment holds, for MLflow (values: its UI's ExperimentKind). MLflow 3.17's UI itself
# picks its GenAI or model-training view by a switch kept per browser (default GenAI), or by
# TRAINING_VIEW in a link's query, not by this tag: training_runs_url links with both.
KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
TRAINING_VIEW = "workflowType=machine_learning"

# --- where runs go ---------------------------------------------------------------


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


# --- calls to the store ------------------------------------------------------------


def make_client(uri: str) -> Any:
    """An MlflowClient; SQLite's first-use schema creation is serialised across processes."""
    from mlflow import MlflowClient

    with init_lock(uri):
        return MlflowClient(tracking_uri=uri)


def create_run(
    client: Any, uri: str, experiment: str, run_name: str, tags: dict[str, str], time_ms: int
) -> str:
    """Create (or find) the experiment, then the run; returns its id."""
    with init_lock(uri):
        experiment_id = _training_experiment(client, experiment, sqlite_path(uri))
    run = client.create_run(experiment_id, start_time=time_ms, tags=tags, run_name=run_name)
    return str(run.info.run_id)


def _training_experiment(client: Any, name: str, db: Path | None) -> str:
    """The id of the experiment `name`, made if need be, and marked as a model-training one."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        # MLflow's default artifact root is ./mlruns of whatever cwd made the
        # database: keep artifacts beside the database instead.
        location = (db.parent / "mlartifacts").as_uri() if db else None
        return str(client.create_experiment(name, artifact_location=location, tags={KIND_TAG: TRAINING_KIND}))
    kind = experiment.tags.get(KIND_TAG, "")
    if not kind or kind.endswith("_inferred") or kind == "no_inferred_type":
        # unset, or the UI's guess: a run of this pipeline says what the experiment is
        client.set_experiment_tag(experiment.experiment_id, KIND_TAG, TRAINING_KIND)
    return str(experiment.experiment_id)


def training_runs_url(base: str, experiment_id: str) -> str:
    """The UI's page of an experiment's training runs, in its model-training view."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}"


def log_model(uri: str, run_id: str, name: str, spec: dict[str, Any], register_as: str | None) -> None:
    """A pyfunc model (`spec`: mlflow.pyfunc.log_model's arguments) logged as an output of the run
    `run_id`, and registered as a new version of `register_as` if given.

    mlflow.pyfunc.log_model takes no run id, so this is the Model.log it calls, given the run and a
    LoggedModel made first in the run's experiment (left alone, MLflow would use the active one).
    """
    import mlflow
    from mlflow.models import Model

    run = make_client(uri).get_run(run_id)
    with global_tracking_uri(uri):  # what Model.log and the registry read
        model = mlflow.initialize_logged_model(
            name=name,
            source_run_id=run_id,
            params=dict(run.data.params),  # as Model.log copies them onto a model it makes itself
            experiment_id=run.info.experiment_id,
        )
        Model.log(
            artifact_path=None,
            name=name,
            flavor=mlflow.pyfunc,
            run_id=run_id,
            model_id=model.model_id,
            registered_model_name=register_as,
            await_registration_for=0,  # a new version of a local or OSS registry is ready at once
            **spec,
        )


def start_system_metrics(uri: str, run_id: str, resume: bool) -> Any:
    """MLflow's SystemMetricsMonitor for the run, started: it samples until its finish(). Its thread
    calls the server on its own: the caller holds quick_http() until then (Tracker does)."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run_id, resume_logging=resume, tracking_uri=uri)
    monitor.start()
    return monitor


# --- the process-wide settings MLflow reads ------------------------------------------------


@contextlib.contextmanager
def global_tracking_uri(uri: str) -> Iterator[None]:
    """mlflow.set_tracking_uri(uri) for a call, then the caller's setting back, and its environment
    (the setter writes MLFLOW_TRACKING_URI, and unsetting clears it)."""
    import mlflow

    env = os.environ.get("MLFLOW_TRACKING_URI")
    before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    if before == env:
        before = None  # the environment's (or mirrored there): putting the variable back restores it
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # type: ignore[arg-type]  # None unsets it, as MLflow's own code does
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


@contextlib.contextmanager
def init_lock(uri: str) -> Iterator[None]:
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
def quick_http() -> Iterator[None]:
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


def with_lock_retries(call: Callable[..., Any]) -> Any:
    """Run `call`, retrying with short pauses while SQLite says the database is locked."""
    for delay in LOCK_RETRY_DELAYS_S:
        try:
            return call()
        except Exception as e:
            if "database is locked" not in str(e) and "database table is locked" not in str(e):
                raise
            time.sleep(delay)
    return call()


# --- what its errors mean -------------------------------------------------------------------


def short(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def reason(error: Exception) -> str:
    """Why MLflow failed, in a few words: the network cause if there is one."""
    import requests

    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, requests.exceptions.Timeout):
            return "the server did not answer in time"
        if isinstance(cause, requests.exceptions.ConnectionError):
            return "cannot connect to the server"
        cause = cause.__cause__ or cause.__context__
    return short(error)


def unreachable(error: BaseException) -> bool:
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


def warn(message: str) -> None:
    click.echo(message, err=True)
