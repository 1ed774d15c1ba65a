"""`python -m pipeline ui`: MLflow's UI over the project's store, and the page it prints opens the
experiment's training runs in the model-training view (checked in headless Chromium where installed)."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline.stages import ui
from pipeline.tracking import store
from tests.support.mlflow_server import free_port
from tests.support.repo import REPO

RUNS = ("baseline", "four-layers")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project root with params.yaml and a store holding two finished runs of the experiment."""
    root = tmp_path_factory.mktemp("project")
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["tracking"]["experiment"] = "nmt-ui"
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = store.make_client(uri)
    for name in RUNS:
        run_id = store.create_run(client, uri, "nmt-ui", name, {}, int(time.time() * 1000))
        client.log_metric(run_id, "dev_bleu", 30.0)
        client.set_terminated(run_id)
    return root


def read_url(server: subprocess.Popen, limit_s: float = ui.START_LIMIT_S) -> str:
    """The page the command prints on stdout, once it has printed it."""
    assert server.stdout is not None
    fd, deadline, seen = server.stdout.fileno(), time.monotonic() + limit_s, b""
    while time.monotonic() < deadline and server.poll() is None:
        if select.select([fd], [], [], 1.0)[0]:
            seen += os.read(fd, 4096)
            found = re.search(rb"http://\S+", seen)
            if found:
                return found.group(0).decode()
    raise AssertionError(f"no page printed within {limit_s:.0f} s: {seen!r}")


@pytest.fixture(scope="module")
def served(project: Path):
    """`python -m pipeline ui` running over the project's store: (its printed page, the process)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DVC_ROOT")}
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "ui", "--port", str(port)],
        cwd=project,
        env={**env, "PYTHONPATH": str(REPO), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # mlflow ui's log
    )
    try:
        yield read_url(server), server
    finally:
        ui.stop(server)  # SIGTERM: the command stops its mlflow ui in turn
    assert not _still_serving(port), "mlflow ui outlived the command"


def _still_serving(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    except OSError:
        return False
    return True


def test_the_printed_page_is_the_experiments_training_runs_in_the_training_view(project, served) -> None:
    url, _ = served
    uri = f"sqlite:///{project / 'mlflow.db'}"
    experiment_id = store.make_client(uri).get_experiment_by_name("nmt-ui").experiment_id
    assert url.endswith(f"/#/experiments/{experiment_id}/runs?{store.TRAINING_VIEW}")
    with urllib.request.urlopen(url.split("#")[0], timeout=10) as answer:  # the UI itself answers
        assert answer.status == 200 and b"<html" in answer.read().lower()


def test_the_page_opens_on_the_training_runs_in_a_real_browser(served) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on this machine (apt-get install chromium) to open the UI in")
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="playwright: pip install -e '.[screenshots]'"
    )
    url, _ = served
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(url, wait_until="load")
        page.get_by_text(RUNS[0], exact=True).wait_for(timeout=30_000)
        text = page.inner_text("body")
        browser.close()
    assert all(name in text for name in RUNS), text[:2000]
    # the model-training view's navigation (its registry), not GenAI's (an overview of traces, judges)
    assert "Model registry" in text and not {"Overview", "Judges", "Playground"} & set(text.split("\n"))


def test_an_experiment_the_store_lacks_is_refused_before_serving(project: Path, monkeypatch) -> None:
    monkeypatch.chdir(project)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    result = CliRunner().invoke(ui.command, ["--experiment", "nmt-missing"])
    assert result.exit_code == 1
    assert "no experiment 'nmt-missing'" in result.output and "dvc repro" in result.output
