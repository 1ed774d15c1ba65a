"""Command `ui`: MLflow's UI over this project's runs, opened on the experiment's training runs.

    python -m pipeline ui                 # serves the local store; prints the page to open

Not a DVC stage. With the default store (mlflow.db at the project root) it starts
`mlflow ui` on it and prints the experiment's training runs page in the UI's
model-training view, which MLflow 3.17 does not open by itself (it opens an
experiment on its GenAI overview unless a browser has chosen "Model training").
With MLFLOW_TRACKING_URI naming a server, it prints that server's page instead.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from pipeline import params as P
from pipeline.errors import UserError
from pipeline.tracking import store

START_LIMIT_S = 120.0  # a cold start of `mlflow ui` migrates a new store's schema first


def experiment_id(uri: str, name: str) -> str:
    """The id of the experiment `name` in the store at `uri`; a one-line refusal if it has none."""
    experiment = store.make_client(uri).get_experiment_by_name(name)
    if experiment is None:
        raise UserError(
            f"no experiment {name!r} in {uri}: run the pipeline first (dvc repro), or name the "
            "experiment with --experiment"
        )
    return str(experiment.experiment_id)


def wait_up(server: subprocess.Popen, base: str, limit_s: float = START_LIMIT_S) -> None:
    """Return once the UI answers at `base`; a one-line error if it exits or stays silent."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise UserError(f"mlflow ui exited with status {server.returncode}: is {base} already in use?")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise UserError(f"mlflow ui did not answer at {base} within {limit_s:.0f} s")


def serve(uri: str, host: str, port: int) -> subprocess.Popen:
    """`mlflow ui` over the SQLite store at `uri`, from this Python's MLflow (in this process's
    group, so a Ctrl-C reaches it too); its log goes to stderr, leaving stdout the page to open."""
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    command += ["--host", host, "--port", str(port), "--workers", "1"]
    return subprocess.Popen(command, stdout=sys.stderr)


def stop(server: subprocess.Popen) -> None:
    """End the server (it ends its own workers), killing it if it will not go in 30 s."""
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so that `finally` stops the server, as on Ctrl-C


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
@click.option("--experiment", default=None, help="Default: tracking.experiment of params.yaml.")
@click.option(
    "--params",
    "params_path",
    type=click.Path(path_type=Path),
    default="params.yaml",
    show_default=True,
)
def command(host: str, port: int, experiment: str | None, params_path: Path) -> None:
    """Serve MLflow's UI over this project's runs and print the page of its training runs."""
    uri = store.tracking_uri()
    name = experiment or P.load(params_path).tracking.experiment
    if store.sqlite_path(uri) is None:  # a tracking server: it serves its own UI
        click.echo(store.training_runs_url(uri, experiment_id(uri, name)))
        return
    found = experiment_id(uri, name)  # before starting anything
    base = f"http://{host}:{port}"
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = serve(uri, host, port)
    try:
        wait_up(server, base)
        click.echo(f"MLflow UI: the training runs of {name}:\n  {store.training_runs_url(base, found)}")
        click.echo("Ctrl-C stops it.", err=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(server)
