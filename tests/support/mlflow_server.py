"""An MLflow tracking server on loopback, started and stopped for a test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.serving import free_port

__all__ = ["free_port", "start_server", "stop_server", "wait_healthy"]


def start_server(tmp_path: Path, port: int) -> subprocess.Popen:
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job-runner processes
    return subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 's.db'}",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so stopping it stops its workers too
    )


def wait_healthy(server: subprocess.Popen, port: int, limit_s: float = 60.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL what is left; fine if already gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # workers left behind in the group
    server.wait(timeout=5)
