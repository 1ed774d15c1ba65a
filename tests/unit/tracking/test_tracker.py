"""The tracker: runs, resume, and staying out of training's way when MLflow fails."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mlflow")
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from pipeline.tracking import metadata, offline, store
from pipeline.tracking.run_file import RUN_FILE
from pipeline.tracking.tracker import Tracker
from tests.support.corpora import raw_manifest, sha
from tests.support.mlflow_server import free_port, start_server, stop_server, wait_healthy

PARAMS = {
    "data": {"train": ["multi30k-train", "tatoeba"], "src_lang": "de", "tgt_lang": "en"},
    "train": {"lr": 0.001, "betas": [0.9, 0.98], "max_steps": 0},
    "model": {"d_model": 256, "encoder_layers": None},
}


@pytest.fixture
def sqlite_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    return uri


def offline_records(directory: Path, op: str) -> list[dict]:
    lines = (directory / offline.OFFLINE_FILE).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["op"] == op]


def warnings_in(text: str) -> int:
    return sum(line.startswith("Warning: MLflow") for line in text.splitlines())


# --- runs ------------------------------------------------------------------------------


def test_run_gets_flat_params_metrics_at_steps_and_tags(
    sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("DVC_EXP_NAME", "exp-1234")
    monkeypatch.setattr(metadata, "git_commit", lambda cwd=None: "f" * 40)
    with Tracker.start(PARAMS, "nmt-test", "run-a", tags={"stage": "train"}, offline_dir=tmp_path) as run:
        for step in range(0, 50, 10):
            run.log_metrics({"loss": 10.0 - step / 10, "lr": 1e-3}, step=step)
        run.log_metrics({"val_bleu": 12.5}, step=40)
        assert run.online
    data = MlflowClient(sqlite_uri).get_run(run.run_id)
    assert data.info.status == "FINISHED" and data.info.run_name == "run-a"
    assert data.data.params["train.lr"] == "0.001"
    assert data.data.params["train.betas"] == "[0.9, 0.98]"
    assert data.data.params["model.encoder_layers"] == "None"
    history = MlflowClient(sqlite_uri).get_metric_history(run.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 10.0), (10, 9.0), (20, 8.0), (30, 7.0), (40, 6.0)]
    tags = data.data.tags
    assert (
        tags["dvc_exp"] == "exp-1234"
        and tags["pair"] == "de-en"
        and tags["corpus"] == "multi30k-train,tatoeba"
    )
    assert tags["git_commit"] == "f" * 40 and tags["stage"] == "train"
    assert tags["sys.python"] and tags["sys.torch"] and tags["sys.device"]
    assert not (tmp_path / offline.OFFLINE_FILE).exists()
    assert "Warning" not in capsys.readouterr().err


def test_a_new_experiment_is_a_model_training_one_and_an_inferred_kind_is_replaced(sqlite_uri: str) -> None:
    with Tracker.start(PARAMS, "nmt-new", "run-k"):
        pass
    client = MlflowClient(sqlite_uri)
    assert client.get_experiment_by_name("nmt-new").tags[store.KIND_TAG] == "custom_model_development"
    for kind, after in (
        ("genai_development_inferred", "custom_model_development"),
        ("finetuning", "finetuning"),
    ):
        experiment_id = client.create_experiment(f"nmt-{kind}", tags={store.KIND_TAG: kind})
        with Tracker.start(PARAMS, f"nmt-{kind}", "run-k"):
            pass
        assert client.get_experiment(experiment_id).tags[store.KIND_TAG] == after  # a user's choice stays


def test_run_has_source_tags(sqlite_uri: str) -> None:
    with Tracker.start(PARAMS, "nmt-test", "run-s") as run:
        pass
    tags = MlflowClient(sqlite_uri).get_run(run.run_id).data.tags
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"]


def test_manifest_sources_are_dataset_inputs_named_with_digest_and_urls(
    sqlite_uri: str, tmp_path: Path
) -> None:
    manifest = raw_manifest(["multi30k-train", "tatoeba"], ["multi30k-val"], ["flickr2016", "mscoco2017"])
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    with Tracker.start(PARAMS, "nmt-test", "run-d") as run:
        run.log_datasets(metadata.manifest_datasets(metadata.read_manifest(path)))
    inputs = MlflowClient(sqlite_uri).get_run(run.run_id).inputs.dataset_inputs
    found = {i.dataset.name: (i.dataset, {t.key: t.value for t in i.tags}) for i in inputs}
    contexts = {name: tags["mlflow.data.context"] for name, (_, tags) in found.items()}
    assert contexts == {
        "multi30k-train": "training",
        "tatoeba": "training",
        "multi30k-val": "validation",
        "flickr2016": "testing",
        "mscoco2017": "testing",
    }
    dataset = found["tatoeba"][0]
    files = manifest["splits"]["train"][1]["files"]
    assert dataset.digest == sha(f"src:{files[0]['sha256']}\ntgt:{files[1]['sha256']}".encode())[:16]
    assert json.loads(dataset.source) == {"urls": [f["source"] for f in files]}
    assert dataset.source_type == "http"
    assert json.loads(dataset.profile)["sha256"] == {"src": files[0]["sha256"], "tgt": files[1]["sha256"]}
    assert len({d.digest for d, _ in found.values()}) == 5  # different data, different digests


def test_system_metrics_are_sampled_while_the_run_is_open(
    sqlite_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    with Tracker.start(PARAMS, "nmt-test", "run-m") as run:
        run.start_system_metrics()
        time.sleep(1.0)
    metrics = MlflowClient(sqlite_uri).get_run(run.run_id).data.metrics
    assert (
        "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics
    )


def test_a_model_mlflow_cannot_log_is_skipped_and_logging_goes_on(
    sqlite_uri: str, capsys: pytest.CaptureFixture
) -> None:
    with Tracker.start(PARAMS, "nmt-test", "run-x") as run:
        run.log_model("model", {"python_model": None, "artifacts": {"model_dir": "/nowhere"}})
        run.log_metrics({"loss": 1.0}, step=1)
        assert run.online
    assert MlflowClient(sqlite_uri).get_run(run.run_id).data.metrics == {"loss": 1.0}
    assert "model record" in capsys.readouterr().err  # MLflow refused it; one line, skipped


def test_artifacts_land_beside_the_database(sqlite_uri: str, tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    report.write_text("# report\n")
    with Tracker.start(PARAMS, "nmt-test", "run-art") as run:
        run.log_artifact(report, "report")
    artifacts = MlflowClient(sqlite_uri).list_artifacts(run.run_id, "report")
    assert [a.path for a in artifacts] == ["report/report.md"]
    assert (tmp_path / "mlartifacts").is_dir()


def test_resume_from_run_file_adds_to_the_same_run(sqlite_uri: str, tmp_path: Path) -> None:
    with Tracker.start(PARAMS, "nmt-test", "run-b") as run:
        run.log_metrics({"loss": 2.0}, step=100)
        run.save_run_file(tmp_path / "model" / RUN_FILE)
    assert json.loads((tmp_path / "model" / RUN_FILE).read_text()) == {
        "run_id": run.run_id,
        "tracking_uri": sqlite_uri,
    }
    with Tracker.from_run_file(tmp_path / "model" / RUN_FILE) as again:
        assert again.run_id == run.run_id
        again.log_metrics({"test_bleu": 35.25}, step=0)
    client = MlflowClient(sqlite_uri)
    runs = client.search_runs([client.get_experiment_by_name("nmt-test").experiment_id])
    assert len(runs) == 1
    assert runs[0].data.metrics == {"loss": 2.0, "test_bleu": 35.25}
    assert runs[0].info.status == "FINISHED"


def test_missing_run_file_gives_a_silent_disabled_tracker(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with Tracker.from_run_file(tmp_path / "nowhere" / RUN_FILE) as run:
        assert not run.enabled and run.run_id is None
        run.log_metrics({"loss": 1.0}, step=1)
        run.log_artifact(tmp_path / "missing.md")
    assert capsys.readouterr().err == ""


def test_unknown_run_id_disables_with_one_line(sqlite_uri: str, capsys: pytest.CaptureFixture) -> None:
    run = Tracker.resume("0" * 32)
    run.log_metrics({"loss": 1.0}, step=1)
    assert not run.enabled
    assert capsys.readouterr().err.count("not found") == 1


# --- failures ------------------------------------------------------------------------------


def test_unreachable_server_warns_once_and_keeps_metrics_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    begin = time.monotonic()
    run = Tracker.start(PARAMS, "nmt-test", "run-off", offline_dir=tmp_path / "model")
    for step in range(20):
        run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    run.end()
    assert time.monotonic() - begin < 20  # seconds, not MLflow's minutes of HTTP retries
    assert not run.online and run.run_id is None
    assert warnings_in(capsys.readouterr().err) == 1
    assert [r["step"] for r in offline_records(tmp_path / "model", "metrics")] == list(range(20))
    (start,) = offline_records(tmp_path / "model", "start")
    assert start["experiment"] == "nmt-test" and start["tags"]["pair"] == "de-en"
    assert offline_records(tmp_path / "model", "params")[0]["params"]["train.lr"] == "0.001"
    assert offline_records(tmp_path / "model", "end")[0]["status"] == "FINISHED"


def test_buffered_metrics_sync_when_mlflow_answers_again(
    sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(offline, "RETRY_SECONDS", (0.0, 0.0))  # retry on every call
    run = Tracker.start(PARAMS, "nmt-test", "run-flaky", offline_dir=tmp_path)
    run.log_metrics({"loss": 5.0}, step=0)

    real_log_batch = MlflowClient.log_batch
    down = {"now": True}

    def flaky_log_batch(self: MlflowClient, *args: object, **kwargs: object) -> None:
        if down["now"]:
            raise MlflowException("API request failed: Connection refused")
        return real_log_batch(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky_log_batch)
    for step in (1, 2, 3):
        run.log_metrics({"loss": 5.0 - step}, step=step)
    assert not run.online
    down["now"] = False
    run.log_metrics({"loss": 1.0}, step=4)
    assert run.online
    run.end()

    history = MlflowClient(sqlite_uri).get_metric_history(run.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 5.0), (1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0)]
    err = capsys.readouterr().err
    assert warnings_in(err) == 1 and "is back; synced 4 buffered records" in err
    assert [r["step"] for r in offline_records(tmp_path, "metrics")] == [1, 2, 3, 4]
    assert offline_records(tmp_path, "synced")[0]["run_id"] == run.run_id


def test_a_refused_record_is_skipped_and_logging_goes_on(
    sqlite_uri: str, capsys: pytest.CaptureFixture
) -> None:
    with Tracker.start(PARAMS, "nmt-test", "run-refused") as run:
        run.log_params({"train": {"lr": 0.5}})  # MLflow params are immutable: refused
        run.log_metrics({"loss": 1.5}, step=3)
        assert run.online
    data = MlflowClient(sqlite_uri).get_run(run.run_id).data
    assert data.params["train.lr"] == "0.001" and data.metrics == {"loss": 1.5}
    err = capsys.readouterr().err
    assert err.count("MLflow refused a params record") == 1 and warnings_in(err) == 0


def test_lock_errors_are_retried(sqlite_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "LOCK_RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    run = Tracker.start(PARAMS, "nmt-test", "run-locked")
    real_log_batch = MlflowClient.log_batch
    failures = {"left": 2}

    def locked_twice(self: MlflowClient, *args: object, **kwargs: object) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise MlflowException("(sqlite3.OperationalError) database is locked")
        return real_log_batch(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", locked_twice)
    run.log_metrics({"loss": 3.0}, step=7)
    assert run.online and failures["left"] == 0
    run.end()
    assert MlflowClient(sqlite_uri).get_run(run.run_id).data.metrics == {"loss": 3.0}


def _log_in_child(uri: str, name: str, steps: int) -> None:
    """A training process: its own run in the shared SQLite file."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    offline_dir = Path(uri.removeprefix("sqlite:///")).parent / name
    run = Tracker.start(PARAMS, "nmt-shared", name, offline_dir=offline_dir)
    for step in range(steps):
        run.log_metrics({"loss": float(step), "lr": 1e-3, "tokens_per_s": 1000.0}, step=step)
    run.log_params({"extra": {"child": name}})
    run.end()
    if not run.online:
        sys.exit(3)


def test_two_processes_share_one_sqlite_file(sqlite_uri: str, tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_log_in_child, args=(sqlite_uri, f"p{i}", 40)) for i in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=90)
    assert [c.exitcode for c in children] == [0, 0]
    client = MlflowClient(sqlite_uri)
    runs = client.search_runs([client.get_experiment_by_name("nmt-shared").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["p0", "p1"]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.params["extra.child"] == r.info.run_name
        assert len(client.get_metric_history(r.info.run_id, "loss")) == 40
    assert not list(tmp_path.glob(f"p*/{offline.OFFLINE_FILE}"))


# --- a real server that dies ------------------------------------------------------------


@pytest.mark.slow
def test_server_dies_mid_run_and_training_keeps_logging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    port = free_port()
    server = start_server(tmp_path, port)
    try:
        if not wait_healthy(server, port):
            pytest.skip("mlflow server did not answer /health within 60 s")
        uri = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        run = Tracker.start(PARAMS, "nmt-server", "run-srv", offline_dir=tmp_path / "model")
        for step in range(5):
            run.log_metrics({"loss": float(step)}, step=step)
        assert run.online
        assert len(MlflowClient(uri).get_metric_history(run.run_id, "loss")) == 5

        stop_server(server)
        begin = time.monotonic()
        for step in range(5, 15):
            run.log_metrics({"loss": float(step)}, step=step)
        run.end()
        assert time.monotonic() - begin < 20
        assert not run.online
        assert [r["step"] for r in offline_records(tmp_path / "model", "metrics")] == list(range(5, 15))
        assert offline_records(tmp_path / "model", "resume")[0]["run_id"] == run.run_id
        assert warnings_in(capsys.readouterr().err) == 1
    finally:
        stop_server(server)
