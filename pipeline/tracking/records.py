"""The records a tracker sends, one per call, and the handler that applies each to MLflow.

A record is a plain dict (`op` and its fields), so that the offline buffer can
keep it as a line of JSON and replay it later. `HANDLERS` maps each op to the
MlflowClient calls that apply it; `refusal` tells an answer that retrying
cannot change (a refused or failed record) from a store that is away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.tracking import store
from pipeline.tracking.store import short

Record = dict[str, Any]

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
MAX_PARAMS_PER_BATCH = 100

# MLflow's answer to a request it refuses (a param logged again with another
# value, a finished run's state): retrying cannot help, so the record is dropped.
REFUSED = {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST", "INVALID_STATE"}


@dataclass
class Target:
    """Where records go: a client of the store at `uri`, and the run (None until a start made it)."""

    client: Any
    uri: str
    run_id: str | None


def apply(to: Target, record: Record) -> None:
    """Apply one record to the run; raises whatever MLflow raises."""
    handler = HANDLERS.get(record["op"])
    if handler is None:
        raise ValueError(f"unknown tracking record {record['op']!r}")
    handler(to, record)


# --- one handler per op -----------------------------------------------------------------


def _start(to: Target, record: Record) -> None:
    to.run_id = store.create_run(
        to.client, to.uri, record["experiment"], record["run_name"], record["tags"], record["time_ms"]
    )


def _check_run(to: Target, record: Record) -> None:
    to.client.get_run(to.run_id)


def _metrics(to: Target, record: Record) -> None:
    from mlflow.entities import Metric

    step, ms = record["step"], record["time_ms"]
    metrics = [Metric(k, v, ms, step) for k, v in record["metrics"].items()]
    for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
        to.client.log_batch(to.run_id, metrics=chunk, synchronous=True)


def _params(to: Target, record: Record) -> None:
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in record["params"].items()]
    for chunk in _chunks(params, MAX_PARAMS_PER_BATCH):
        to.client.log_batch(to.run_id, params=chunk, synchronous=True)


def _tags(to: Target, record: Record) -> None:
    from mlflow.entities import RunTag

    tags = [RunTag(k, v) for k, v in record["tags"].items()]
    for chunk in _chunks(tags, MAX_PARAMS_PER_BATCH):
        to.client.log_batch(to.run_id, tags=chunk, synchronous=True)


def _artifact(to: Target, record: Record) -> None:
    if Path(record["path"]).is_file():
        to.client.log_artifact(to.run_id, record["path"], record["artifact_path"])


def _artifacts(to: Target, record: Record) -> None:
    if Path(record["path"]).is_dir():
        to.client.log_artifacts(to.run_id, record["path"], record["artifact_path"])


def _datasets(to: Target, record: Record) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    fields = ("name", "digest", "source_type", "source", "schema", "profile")
    inputs = [
        DatasetInput(Dataset(**{k: d[k] for k in fields}), [InputTag("mlflow.data.context", d["context"])])
        for d in record["datasets"]
    ]
    to.client.log_inputs(to.run_id, datasets=inputs)


def _model(to: Target, record: Record) -> None:
    assert to.run_id is not None, "a model record follows the run's start or check"
    store.log_model(to.uri, to.run_id, record["name"], record["spec"], record["register_as"])


def _end(to: Target, record: Record) -> None:
    to.client.set_terminated(to.run_id, record["status"], end_time=record["time_ms"])


def _status(to: Target, record: Record) -> None:
    to.client.update_run(to.run_id, status=record["status"])


def _end_if_running(to: Target, record: Record) -> None:
    if to.client.get_run(to.run_id).info.status == "RUNNING":
        _end(to, record)


HANDLERS: dict[str, Callable[[Target, Record], None]] = {
    "start": _start,
    "check_run": _check_run,
    "metrics": _metrics,
    "params": _params,
    "tags": _tags,
    "artifact": _artifact,
    "artifacts": _artifacts,
    "datasets": _datasets,
    "model": _model,
    "end": _end,
    "status": _status,
    "end_if_running": _end_if_running,
}


# --- what an error means -------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """MLflow answered a record, and retrying would get the same answer: say so and move on."""

    message: str
    run_missing: bool = False  # no such run: nothing more can be logged to it


def refusal(record: Record, error: Exception, run_id: str | None, uri: str | None) -> Refusal | None:
    """The refusal `error` is, or None if it may be the store being away (worth retrying later)."""
    code = getattr(error, "error_code", None)
    if code == "RESOURCE_DOES_NOT_EXIST":
        return Refusal(f"MLflow: run {run_id} not found at {uri}; not logging to it", run_missing=True)
    if code in REFUSED and "locked" not in str(error):
        return Refusal(f"MLflow refused a {record['op']} record ({short(error)}); skipped")
    if record["op"] in ("model", "datasets") and not store.unreachable(error):
        # not the store being away: retrying would fail the same way and hold up every later record
        return Refusal(f"MLflow: could not log the {record['op']} ({short(error)}); skipped")
    return None


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
