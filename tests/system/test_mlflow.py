"""A tiny training run as MLflow users meet it: the logged model loaded and served over HTTP
(`mlflow models serve`), and the run page's data (logged model, datasets, metrics per test set)
read through a real `mlflow server`'s REST API, as the UI reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from pipeline.serving import pyfunc
from pipeline.stages.score import log_final_scores, log_trained_model
from pipeline.stages.train import train
from pipeline.tracking import metadata, store
from pipeline.tracking.run_file import RUN_FILE
from tests.support.corpora import raw_manifest
from tests.support.mlflow_server import free_port, start_server, stop_server, wait_healthy
from tests.support.models import make_corpus, model_weights, tiny_params

pytestmark = pytest.mark.slow

TESTS = ["flickr2016", "mscoco2017"]
# an empty line, a line far over the model's max_positions, and text in a script it never saw
BATCH = ["abc def", "", " ".join(["abcdefgh"] * 400), "Привет, мир! 你好，世界", "gh ab"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny model trained with tracking into root/s.db (the store support.mlflow_server serves),
    and test scores, the manifest's datasets and the model logged as the score stage logs them."""
    root = tmp_path_factory.mktemp("mlflow-run")
    uri = f"sqlite:///{root / 's.db'}"
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps(raw_manifest(["multi30k-train"], ["multi30k-val"], TESTS)))
    paths = make_corpus(root, n_train=60)
    saved = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        params = tiny_params(max_steps=4)
        train(params, paths)
        scores = {
            "bleu": 10.0,
            "chrf": 30.0,
            "ter": 80.0,
            "signature": {"bleu": "nrefs:1"},
            "refs_sha256": "0",
        }
        results = {"test": {name: {**scores, "bleu": 10.0 + i} for i, name in enumerate(TESTS)}}
        log_final_scores(paths.out_dir / RUN_FILE, results, manifest=manifest)
        log_trained_model(paths.out_dir, params, ["abc def", "gh ab"])
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI") if saved is None else os.environ.update(
            MLFLOW_TRACKING_URI=saved
        )
    run_id = json.loads((paths.out_dir / RUN_FILE).read_text())["run_id"]
    return {"root": root, "uri": uri, "run_id": run_id, "model_dir": paths.out_dir}


def post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def test_logged_model_loads_and_translates(run: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["uri"])
    model = mlflow.pyfunc.load_model(f"runs:/{run['run_id']}/model")
    # Logged from code (pyfunc.py, nothing pickled), with the signature pyfunc gives, search params and all.
    flavor = model.metadata.flavors["python_function"]
    assert flavor["model_code_path"].endswith("pyfunc.py") and "python_model" not in flavor
    assert model.metadata.signature == pyfunc.signature()
    out = model.predict(BATCH)
    assert len(out) == len(BATCH) and all(isinstance(t, str) for t in out) and out[1] == ""
    assert model.predict(BATCH[:1], params={"n_best": 2, "beam": 2})[0][0] == out[0]
    sampled = model.predict(BATCH, params={"sample": True, "temperature": 1.5, "seed": 3})
    assert sampled == model.predict(BATCH, params={"sample": True, "temperature": 1.5, "seed": 3})
    assert len(sampled) == len(BATCH) and sampled[1] == ""


def test_served_model_translates_a_batch_over_http(run: dict[str, Any]) -> None:
    import mlflow

    port = free_port()
    bin_dir = str(Path(sys.executable).parent)  # serve execs `uvicorn` from PATH, as in an activated venv
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": run["uri"],
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    server = subprocess.Popen(
        [
            *(str(Path(bin_dir) / "mlflow"), "models", "serve"),
            *("-m", f"runs:/{run['run_id']}/model", "--env-manager", "local"),
            *("--host", "127.0.0.1", "--port", str(port)),
        ],
        cwd=run["root"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/invocations"
        status, answer = post(url, json.dumps({"inputs": BATCH}).encode())
        assert status == 200, answer
        with pytest.MonkeyPatch.context() as m:
            m.setenv("MLFLOW_TRACKING_URI", run["uri"])
            expected = mlflow.pyfunc.load_model(f"runs:/{run['run_id']}/model").predict(BATCH)
        assert answer == {"predictions": expected}  # one per input, in order; "" for the empty line
        frame = {
            "dataframe_split": {"columns": ["text"], "data": [[s] for s in BATCH]},
            "params": {"beam": 2},
        }
        status, answer = post(url, json.dumps(frame).encode())
        assert status == 200 and len(answer["predictions"]) == len(BATCH)

        status, answer = post(url, b'{"inputs": ["unterminated')
        assert status == 400 and "json" in answer["message"].lower()
        status, answer = post(url, json.dumps({"inputs": ["a"], "params": {"beam": 0}}).encode())
        assert status == 400 and "beam" in answer["message"]
        status, answer = post(url, json.dumps({"text": ["a"]}).encode())
        assert status == 400 and answer["error_code"] == "BAD_REQUEST"
        status, answer = post(url, json.dumps({"inputs": ["ein hund"] * 10_000}).encode())
        assert status == 400 and "max_request_lines" in answer["message"]
        status, answer = post(url, json.dumps({"inputs": ["ein hund " * 12_000]}).encode())
        assert status == 400 and "max_line_chars" in answer["message"]
        status, answer = post(url, json.dumps({"inputs": BATCH}).encode())
        assert status == 200 and answer == {"predictions": expected}  # the server lives on
    finally:
        stop_server(server)


def test_rest_api_shows_the_logged_model_datasets_and_test_scores(run: dict[str, Any]) -> None:
    port = free_port()
    server = start_server(run["root"], port)
    try:
        assert wait_healthy(server, port)
        api = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        data = get(f"{api}/runs/get?run_id={run['run_id']}")["run"]
        experiment_id = data["info"]["experiment_id"]
        experiment = get(f"{api}/experiments/get?experiment_id={experiment_id}")["experiment"]
        kind = {t["key"]: t["value"] for t in experiment["tags"]}[store.KIND_TAG]
        assert kind == store.TRAINING_KIND

        (output,) = data["outputs"]["model_outputs"]
        status, found = post(
            f"{api}/logged-models/search", json.dumps({"experiment_ids": [experiment_id]}).encode()
        )
        assert status == 200
        (model,) = found["models"]
        assert model["info"]["model_id"] == output["model_id"]
        assert model["info"]["name"] == "model" and model["info"]["source_run_id"] == run["run_id"]

        datasets = {d["dataset"]["name"]: d for d in data["inputs"]["dataset_inputs"]}
        assert set(datasets) == {"multi30k-train", "multi30k-val", *TESTS}
        assert all(len(d["dataset"]["digest"]) == metadata.DIGEST_CHARS for d in datasets.values())

        metrics = {m["key"]: m["value"] for m in data["data"]["metrics"]}
        assert {f"test.{name}.bleu" for name in TESTS} <= set(metrics)
        assert any(key.startswith("system/") for key in metrics) or "train_seconds" in metrics
        tags = {t["key"]: t["value"] for t in data["data"]["tags"]}
        assert tags["mlflow.source.type"] == "LOCAL" and int(tags["n_params"]) > 0
    finally:
        stop_server(server)


def test_tracking_only_watches_a_training_on_and_off_end_with_the_same_weights(
    run: dict[str, Any], tmp_path: Path
) -> None:
    """What MLflow is told cannot change a number: why the train stage need not depend on its code."""
    paths = make_corpus(tmp_path, n_train=60)
    train(tiny_params(max_steps=4), paths, tracking=False)
    tracked, untracked = (
        model_weights(run["model_dir"] / "model.pt"),
        model_weights(paths.out_dir / "model.pt"),
    )
    assert tracked.keys() == untracked.keys()
    assert all(torch.equal(tracked[k], untracked[k]) for k in tracked)
    assert json.loads((paths.out_dir / RUN_FILE).read_text())["run_id"] is None
